//! Flushing subnormal numbers to zero, PyTorch's `torch.set_flush_denormal`.
//!
//! Intel cores run an arithmetic instruction whose operand or result is subnormal (below
//! `f32::MIN_POSITIVE` in magnitude, not zero) through a microcode assist that costs about a
//! hundred cycles. A deep network whose gradients shrink layer by layer reaches that range: the
//! benchmark `deep_backward_memory` (200 × `Linear(512, 512)` + `tanh`) took 3.7 s on the
//! project's Intel machine, PyTorch 3.9 s, against 0.14 s in a run on AMD cores, which take no
//! assist.
//! With the mode on, the processor treats subnormal operands as zero (x86-64 `DAZ`) and writes
//! zero for subnormal results (`FTZ`), so those products run at full speed.
//!
//! Off by default, as in PyTorch: with it off every result is the IEEE one, and every
//! comparison with the reference engine (the conformance suite, `check-equivalence`) runs that
//! way. The mode is a per-thread processor setting; [`set_flush_denormal`] sets it on the
//! calling thread and on every thread of the engine's pools, and pools built later start with
//! it.

use std::sync::atomic::{AtomicBool, Ordering};

/// The mode the engine's threads should have; pools built later read it when they start.
static FLUSH: AtomicBool = AtomicBool::new(false);

/// Sets whether subnormal `f32`/`f64` numbers are flushed to zero (operands read as zero,
/// results written as zero) on the calling thread, on every thread of the pools
/// [`crate::with_threads`] has built or builds later, and on rayon's current pool (the global
/// one when called outside any pool; this initialises it if nothing has yet, so build a custom
/// global pool first). Returns `false`, changing nothing, where the target has no such mode
/// (only x86-64 has it here), as PyTorch's `set_flush_denormal` does.
///
/// Threads that neither called this nor belong to those pools keep their own mode.
pub fn set_flush_denormal(on: bool) -> bool {
    if !SUPPORTED {
        return false;
    }
    FLUSH.store(on, Ordering::SeqCst);
    apply_here();
    rayon::broadcast(|_| apply_here());
    crate::threads::broadcast_to_pools(apply_here);
    true
}

/// Whether [`set_flush_denormal`] last turned the mode on.
pub fn flush_denormal() -> bool {
    FLUSH.load(Ordering::SeqCst)
}

/// Gives the calling thread the engine's mode (a pool thread's start handler calls this).
pub(crate) fn apply_here() {
    set_this_thread(FLUSH.load(Ordering::SeqCst));
}

const SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits.
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn set_this_thread(on: bool) {
    let mut csr: u32 = 0;
    // SAFETY: `stmxcsr` stores the 4-byte MXCSR register to the address given, here a local
    // `u32` this function owns; it touches no other memory and no flags.
    unsafe {
        std::arch::asm!(
            "stmxcsr [{}]",
            in(reg) &mut csr,
            options(nostack, preserves_flags)
        );
    }
    let csr = if on { csr | FTZ_DAZ } else { csr & !FTZ_DAZ };
    // SAFETY: `ldmxcsr` loads MXCSR from a local `u32`. The value is the register's own with
    // only the FTZ and DAZ bits changed, so no reserved bit is set (which would fault) and the
    // rounding mode and exception masks are kept. The bits change only how subnormal numbers
    // are read and written by SSE/AVX instructions.
    unsafe {
        std::arch::asm!(
            "ldmxcsr [{}]",
            in(reg) &csr,
            options(nostack, readonly, preserves_flags)
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn set_this_thread(_on: bool) {}
