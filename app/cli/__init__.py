"""The terminal face of Fireside: the same core as the window, driven from a shell."""
