"""The interpreter channel: executes ops and owns every tensor's buffer (seed ``003``).

* ``channel.py`` -- ``Channel``, the caller's side: ``put``, ``apply_op``, ``del_``, reading values
  and shapes, waiting, errors, options, scopes, the test API, fork.
* ``caller_lock.py`` -- ``CallerLock``, the reentrant lock that serialises the callers' threads
  and refuses the worker's (a few C field reads per op when compiled).
* ``locking.py`` -- the public calls off the per-op path, each under the callers' lock.
* ``introspection.py`` -- the test API (``counters``, ``buffered``, ``worker_thread``, ``idle``).
* ``executor.py`` -- the worker's side: running commands, the one call of a device's kernel door.
* ``swap_drop.py`` -- swap out/in, drop, and recomputing dropped values from their producers.
* ``dtr_mechanism.py`` -- DTR's recording, eviction and freeing (its policy is ``../dtr.py``).
* ``worker.py`` -- the worker thread.
* ``command_buffer.py`` -- the commands and the buffer that fuses ``Del`` into the last reader.
* ``handles.py`` -- ``TensorInfo`` (a tensor in the channel) and ``ComputePath`` (its producer).
* ``options.py`` -- the options, with MegEngine's names and environment variables.

The channel never looks inside a value: buffers, kernels, transfers and storage sizes belong to the
devices (``mge/_core/device``).
"""
from .. import _accel
from .options import OPTIONS  # noqa: F401

_impl = _accel.load("mge._core.channel.channel")
Channel = _impl.Channel
UnusableTensorError = _impl.UnusableTensorError
AsyncError = _impl.AsyncError
get_channel = _impl.get_channel
infer_outputs = _impl.infer_outputs
