"""The state of AMP autocast, read by the dtype_promote plugin and set through ``mge.amp``."""
import numpy as np

enabled = False
low_prec_dtype = np.dtype("float16")
high_prec_dtype = np.dtype("float32")
convert_inputs = True
