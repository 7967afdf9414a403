"""The CUDA device (``gpu0``/``cuda0``) through pycuda -- an optional extra, imported lazily.

``import mge`` never imports pycuda.  The parts that need no GPU are usable and tested
everywhere:

* ``nvrtc.py`` -- NVRTC (CUDA C -> PTX) and ``ptxas`` (PTX -> SASS) through ctypes and a
  subprocess; they need no driver and no GPU (the ``nvidia-cuda-nvrtc-cu12`` and
  ``nvidia-cuda-nvcc-cu12`` wheels carry them).
* ``kernels/`` -- CUDA C generated from a template per op and dtype signature.
* ``pool.py`` -- the caching allocator's bookkeeping over an address space (device memory
  through pycuda, or a fake space in the tests).
* ``driver.py`` -- finding pycuda, the driver and the GPUs; the primary context; fork safety.
"""
