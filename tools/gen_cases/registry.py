"""The case registry: `@case(...)` on a function that returns `(module, input)`."""

REGISTRY = []


class CaseDef:
    """A registered case: `build()` returns `(module, input)`."""

    def __init__(self, name, build, dtype, omit, train):
        self.name = name
        self.build = build
        self.dtype = dtype
        self.omit = omit or {}
        self.train = train


def case(name=None, dtype="f64", omit=None, train=False):
    """Registers a case. `dtype="f32"` marks the case to run in f32 (expectations stay f64);
    `omit={"kind": ["attr", ...]}` drops those attributes from every node of that kind, so the
    IR's default is what the case checks against PyTorch; `train=True` exports and runs the
    module in training mode (batch statistics), otherwise it is `eval()`ed."""

    def wrap(f):
        n = name or f.__name__
        if any(c.name == n for c in REGISTRY):
            raise ValueError(f"case {n} registered twice")
        REGISTRY.append(CaseDef(n, f, dtype, omit, train))
        return f

    return wrap
