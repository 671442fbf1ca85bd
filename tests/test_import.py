"""``import scatterx`` leaves ml_dtypes, whose own import takes about a second, until bfloat16 is
first needed. Each check runs in a fresh interpreter, where nothing has imported it yet."""

from __future__ import annotations

import subprocess
import sys

_WITHOUT = """
import sys
import numpy as np
import scatterx as sx
assert "ml_dtypes" not in sys.modules, "import scatterx imported ml_dtypes"
data = np.arange(12, dtype=np.float32).reshape(3, 4)
idx = np.array([[2, 0, 1, 2]])
upd = np.full((1, 4), 10, np.float32)
want = data.copy()
np.add.at(want, (idx, np.arange(4)[None]), upd)
assert sx.scatter_elements(data, idx, upd, 0, "add").tobytes() == want.tobytes()
assert sx.gather_elements(data, idx, 0).tobytes() == np.take_along_axis(data, idx, 0).tobytes()
big = np.zeros((300, 64), np.float64)
sx.scatter_elements(big, np.zeros((2, 64), np.int32), np.ones((2, 64)), 0, "add")
sx.scatter_elements_vjp(np.ones_like(data), data, idx, upd, 0, "mul")
try:
    sx.scatter_elements(data.astype("M8[s]"), idx, upd.astype("M8[s]"), 0)
except TypeError as e:
    assert "does not support dtype datetime64" in str(e), e
else:
    raise AssertionError("datetime64 data was accepted")
assert "ml_dtypes" not in sys.modules, "a call without bfloat16 imported ml_dtypes"
"""

# bfloat16 arrays made after `import scatterx`: the first call, which the core's short path does
# not know yet, goes the long way and tells the core the type; later calls take the short path.
_BFLOAT16_LATER = """
import numpy as np
import scatterx as sx
from scatterx import _core
import ml_dtypes
bf = np.dtype(ml_dtypes.bfloat16)
rng = np.random.default_rng(0)
data = rng.standard_normal((6, 40)).astype(bf)
idx = np.argsort(rng.random((6, 40)), axis=0)[:4]
upd = rng.standard_normal((4, 40)).astype(bf)
assert _core.scatter_fast(data, idx, upd, 0, "none") is None, "the core knew bfloat16 already"
want = data.copy()
np.put_along_axis(want, idx, upd, axis=0)
got = sx.scatter_elements(data, idx, upd, 0, "none")
assert got.dtype == bf and got.tobytes() == want.tobytes()
short = _core.scatter_fast(data, idx, upd, 0, "none")
assert short is not None and short.tobytes() == want.tobytes()
taken = np.take_along_axis(data, idx, 0)
assert _core.gather_fast(data, idx, 0).tobytes() == taken.tobytes()
g = rng.standard_normal((6, 40)).astype(bf)
grad_data, grad_updates = sx.scatter_elements_vjp(g, data, idx, upd, 0, "add")
assert grad_data.dtype == bf and grad_data.tobytes() == g.tobytes()
assert grad_updates.tobytes() == np.take_along_axis(g, idx, 0).tobytes()
"""


def _run(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_import_and_calls_without_bfloat16_leave_ml_dtypes_out():
    _run(_WITHOUT)


def test_bfloat16_arrays_made_after_the_import_take_both_paths():
    _run(_BFLOAT16_LATER)
