"""Run a model file from the command line: ``python -m mge.jit.run model.mge --input x=x.npy``.

The model is a file ``trace.dump`` wrote (``mge/jit/dump.py``).  Each ``--input NAME=FILE``
gives an input's value as a ``.npy`` file (read without pickles); with a single input the
``NAME=`` may be left out.  Each output is printed with its name, shape, dtype and a summary
(min, max, mean; the values themselves when there are few); ``--output out.npz`` saves them
(``numpy.load`` reads them back by output name).  ``--info`` prints the model's inputs and
outputs without running it.

Exit status: 0 on success; 2 for wrong arguments (unknown, missing or repeated input names,
inputs of the wrong shape or dtype, unreadable ``.npy`` files); 1 when the model file cannot be
read or the model fails while running.
"""
import argparse
import sys

import numpy as np

__all__ = ["main"]

_SHOW_VALUES = 8  # outputs with at most this many elements are printed in full


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m mge.jit.run",
        description="Run an mge model file (written by mge.jit.trace.dump) on inputs from .npy "
                    "files and print (or save) its outputs.",
        epilog="Exit status: 0 success, 2 bad arguments or inputs, 1 unreadable model or a "
               "failure while running.  Example: python -m mge.jit.run model.mge --input "
               "x=x.npy --output out.npz")
    p.add_argument("model", help="the model file (trace.dump's output)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input's value as a .npy file; repeat for each input (NAME= may be "
                        "left out when the model has one input)")
    p.add_argument("--output", "-o", metavar="OUT.npz",
                   help="save the outputs to this .npz file, by output name")
    p.add_argument("--info", action="store_true",
                   help="print the model's inputs and outputs and exit without running it")
    return p


def _summary(a):
    if a.size == 0:
        return "(empty)"
    if a.size <= _SHOW_VALUES:
        return "values " + np.array2string(a.reshape(-1), separator=", ", precision=6,
                                            max_line_width=1 << 20)
    if a.dtype.kind == "b":
        return f"{int(a.sum())} of {a.size} true"
    f = a.astype(np.float64)
    finite = np.isfinite(f)
    text = ""
    if not finite.all():
        text = f"{int((~finite).sum())} non-finite; "
        f = f[finite]
    if f.size == 0:
        return text.rstrip("; ")
    return text + f"min {f.min():.6g}, max {f.max():.6g}, mean {f.mean():.6g}"


def _save_npz(path, arrays):
    # numpy.savez's layout (NAME.npy members), written directly: any output name is a key
    import zipfile
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name, a in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)


def _print_info(model, path):
    print(f"model {path}: {model.num_ops} ops, format version {model.version}"
          + (f", written by {model.producer}" if model.producer else ""))
    for spec in model.inputs:
        print(f"  input  {spec.name}: shape {spec.shape}, {spec.dtype}")
    for name in model.output_names:
        print(f"  output {name}")
    if model.user_info is not None:
        print(f"  user_info: {model.user_info!r}")


def main(argv=None):
    """The command line (``argv`` without the program name; default ``sys.argv[1:]``).

    Returns the exit status (0, 1 or 2; see the module docstring).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    from .dump import load

    try:
        model = load(args.model)
    except (ValueError, OSError) as e:
        print(f"python -m mge.jit.run: error: {e}", file=sys.stderr)
        return 1
    if args.info:
        _print_info(model, args.model)
        return 0

    def bad(message):
        parser.print_usage(sys.stderr)
        print(f"python -m mge.jit.run: error: {message}", file=sys.stderr)
        return 2

    names = [s.name for s in model.inputs]
    feeds = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            if len(names) != 1:
                return bad(f"--input {item!r}: give NAME=FILE (the model's inputs: "
                           f"{', '.join(names) or 'none'})")
            name, path = names[0], item
        if name not in names:
            return bad(f"--input {item!r}: the model has no input {name!r} (its inputs: "
                       f"{', '.join(names) or 'none'})")
        if name in feeds:
            return bad(f"--input: {name!r} is given twice")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            return bad(f"--input {name}={path}: cannot read a .npy array ({e})")
        if not isinstance(feeds[name], np.ndarray):
            return bad(f"--input {name}={path}: not a .npy file (an .npz archive?)")
    missing = [n for n in names if n not in feeds]
    if missing:
        specs = ", ".join(f"{s.name} {s.shape} {s.dtype}" for s in model.inputs
                          if s.name in missing)
        return bad(f"missing --input for {specs}")
    try:
        tensors = model.check_inputs(**feeds)
    except (ValueError, TypeError) as e:
        return bad(str(e))
    try:
        outputs = {k: t.numpy() for k, t in model.run(*tensors).items()}
    except Exception as e:
        print(f"python -m mge.jit.run: error: the model failed: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    for name, a in outputs.items():
        print(f"{name}: shape {a.shape}, {a.dtype}, {_summary(a)}")
    if args.output:
        try:
            _save_npz(args.output, outputs)
        except OSError as e:
            print(f"python -m mge.jit.run: error: cannot write {args.output}: {e}",
                  file=sys.stderr)
            return 1
        print(f"saved {len(outputs)} output(s) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
