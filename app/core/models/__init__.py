"""The model library: GGUF headers read and cached, the catalog of model files found on
disk and in other apps' stores, the folders watched, the bundled models, the servers'
models listed beside the files, and which model to use.

May import ``remote`` (the servers the user added), settings and the shared types; never
llama.cpp, conversations or a face.
"""
