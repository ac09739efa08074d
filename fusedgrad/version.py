"""fusedgrad's version: a leaf module, so lowering can record it without importing the public API."""
__version__ = "0.1.0"
