//! The kernel sources: CUDA C, one module per op family, compiled at run time (NVRTC on a GPU,
//! a host C++ compiler for the emulation) and cached per process.
//!
//! Every module is [`PRELUDE`] followed by its `.cu` file. The prelude is the only place that
//! differs between the two compilers: on NVRTC it is a few helpers; under `TORCHLEAN_EMU` it
//! also defines CUDA's built-in indices and qualifiers for a plain C++ compiler.
//!
//! The rules every kernel follows (checked by [`check_rules`], run by the tests):
//!
//! - `extern "C" __global__ void name(...)`, one-dimensional launches (`blockIdx.x`,
//!   `blockDim.x`, `threadIdx.x`, `gridDim.x`), grid-stride loops so any grid covers any size;
//! - no `__shared__`, no `__syncthreads`, no atomics: every output element is written by exactly
//!   one thread and every sum runs in a fixed order, so results are identical run to run (the
//!   engine's determinism) and the host emulation, which runs threads one after another,
//!   computes exactly what the device computes up to the rounding of library functions;
//! - sizes and indices are `long long` (`tl_index`); parameters are `float*` / `const float*`
//!   buffers, `const long long*` index tables, and `long long` / `float` / `unsigned long long`
//!   scalars.

pub mod codes;

/// One kernel module: a name and its CUDA C source (without the prelude). Modules are told
/// apart by their names (a test keeps them unique).
#[derive(Clone, Copy, Debug)]
pub struct Module {
    pub name: &'static str,
    pub source: &'static str,
    /// Source generated from Rust tables and put before the file's (the elementwise codes,
    /// [`codes::defines`]).
    pub generated: Option<fn() -> String>,
}

/// A kernel: its module and its `extern "C"` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub module: &'static Module,
    pub name: &'static str,
}

impl PartialEq for Module {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Module {}

impl Module {
    /// The kernel `name` of this module (checked against the source by the tests, and by the
    /// devices when they load it).
    pub const fn kernel(&'static self, name: &'static str) -> Kernel {
        Kernel { module: self, name }
    }

    /// The full source compiled for this module: the prelude, the generated part, then the
    /// module's file.
    pub fn full_source(&self) -> String {
        let generated = self.generated.map_or_else(String::new, |g| g());
        format!(
            "{PRELUDE}\n{generated}#line 1 \"{}.cu\"\n{}",
            self.name, self.source
        )
    }

    /// The names of the module's kernels, in source order (every `extern "C" __global__ void
    /// name(`).
    pub fn kernel_names(&self) -> Vec<&'static str> {
        kernel_names(self.source)
    }
}

/// Names declared `extern "C" __global__ void name(` in `source`, in order.
pub fn kernel_names(source: &'static str) -> Vec<&'static str> {
    const DECL: &str = "extern \"C\" __global__ void ";
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(DECL) {
        rest = &rest[at + DECL.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        names.push(&rest[..end]);
    }
    names
}

/// What every module starts with. `TORCHLEAN_EMU` is defined by the host emulation only.
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// Elementwise: unary functions and their VJPs, binary ops and their VJPs, scale, shifts, clamp,
/// accumulation, fills and copies.
pub static ELEMENTWISE: Module = Module {
    name: "elementwise",
    source: include_str!("elementwise.cu"),
    generated: Some(codes::defines),
};
/// Layout: broadcast (and its summing VJP), permute, slice, concat.
pub static LAYOUT: Module = Module {
    name: "layout",
    source: include_str!("layout.cu"),
    generated: None,
};
/// Reductions and losses: axis sums/means, spreads, whole sums, MSE, cross entropy.
pub static REDUCE: Module = Module {
    name: "reduce",
    source: include_str!("reduce.cu"),
    generated: None,
};
/// Normalisers: softmax, log-softmax, layer norm, batch norm (eval and train).
pub static NORM: Module = Module {
    name: "norm",
    source: include_str!("norm.cu"),
    generated: None,
};
/// Pooling (max and average) and their VJPs.
pub static POOL: Module = Module {
    name: "pool",
    source: include_str!("pool.cu"),
    generated: None,
};
/// What the products need around cuBLAS: bias rows, column sums, convolution patch matrices
/// and their adjoint.
pub static PRODUCTS: Module = Module {
    name: "products",
    source: include_str!("products.cu"),
    generated: None,
};
/// Seeded randomness (the reference's counter-based generator, bit for bit).
pub static RANDOM: Module = Module {
    name: "random",
    source: include_str!("random.cu"),
    generated: None,
};

/// Optimizer steps (SGD, Adam/AdamW, RMSprop, Adagrad), in place on a parameter and its state.
pub static OPTIM: Module = Module {
    name: "optim",
    source: include_str!("optim.cu"),
    generated: None,
};

/// Every module, in a fixed order (the NVRTC test compiles each; the emulation links them all).
pub static MODULES: [&Module; 8] = [
    &ELEMENTWISE,
    &LAYOUT,
    &REDUCE,
    &NORM,
    &POOL,
    &PRODUCTS,
    &RANDOM,
    &OPTIM,
];

/// A broken rule of the kernel sources (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleViolation {
    pub module: &'static str,
    pub line: usize,
    pub what: &'static str,
}

/// Checks the rules of the module docs on every source: no shared memory, no block
/// synchronisation, no atomics, and unique kernel names across modules (the emulation links
/// them into one library).
pub fn check_rules() -> Vec<RuleViolation> {
    const FORBIDDEN: [(&str, &str); 4] = [
        ("__shared__", "shared memory"),
        ("__syncthreads", "block synchronisation"),
        (
            "atomic",
            "an atomic operation (sums must run in a fixed order)",
        ),
        ("threadIdx.y", "a multi-dimensional launch"),
    ];
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for m in MODULES {
        for (i, line) in m.source.lines().enumerate() {
            for (pat, what) in FORBIDDEN {
                if line.contains(pat) {
                    out.push(RuleViolation {
                        module: m.name,
                        line: i + 1,
                        what,
                    });
                }
            }
        }
        for name in m.kernel_names() {
            if !seen.insert(name) {
                out.push(RuleViolation {
                    module: m.name,
                    line: 0,
                    what: "a kernel name used by two modules",
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_read_from_declarations_in_order() {
        let src = "extern \"C\" __global__ void first(float* y) {}\n\
                   __device__ float helper(float x) { return x; }\n\
                   extern \"C\" __global__ void second_2(const float* x, long long n) {}";
        assert_eq!(kernel_names(src), vec!["first", "second_2"]);
        assert!(kernel_names("__device__ float f();").is_empty());
    }

    #[test]
    fn every_module_has_its_own_name() {
        let names: std::collections::HashSet<&str> = MODULES.iter().map(|m| m.name).collect();
        assert_eq!(names.len(), MODULES.len());
    }

    #[test]
    fn every_module_follows_the_kernel_rules() {
        assert_eq!(check_rules(), vec![]);
    }

    #[test]
    fn the_prelude_defines_the_emulation_only_under_its_macro() {
        assert!(PRELUDE.contains("#ifdef TORCHLEAN_EMU"));
        assert!(ELEMENTWISE.full_source().starts_with(PRELUDE));
    }
}
