"""The Hugging Face Hub, reached only when the user searches or downloads: the address
and token, search and a repository's GGUF files, a file's header read by ranges and the
fit it gives on this machine, and downloads that resume and check their sha256.

May import llama.cpp's fit code (``llama``: devices, offload, memory), the model
library, settings and ``remote``'s keyring; never conversations, tools or a face.
"""
