"""PyTorch integration: fusedgrad's kernels as torch custom ops, autograd modules and functions.

Imported only on request (``import fusedgrad.torch``); needs torch.
"""
