//! The memory budget: how many bytes a graph's values, gradients and engine workspaces may take,
//! checked from shapes alone before anything is allocated.
//!
//! The estimate of one node is [`NodeCost`]: its value, its gradient (for a [`Pass::Grad`]) and
//! the workspace its op's rule declares ([`crate::Op::workspace_elements`], next to the shape
//! rule). A graph's total is
//! the sum over its nodes (every evaluator here holds every value until the end), counted in
//! the engine's element size. Callers (the IR's `check_budget`, `GraphData::check_budget`) walk
//! their nodes through a [`Tally`], which says which node crossed the limit.
//!
//! [`Budget::process_default`] is what entry points without an explicit budget use: set once by
//! the program (`torchlean --max-memory`), otherwise sized to the machine (a fraction of the
//! smallest of physical memory, the cgroup limit and the address-space limit).

use crate::error::{ByteCountProblem, Result, SpecError};
use std::sync::OnceLock;

/// The budget when nothing about the machine can be read: 4 GiB.
pub const FALLBACK_BYTES: u64 = 4 << 30;

/// The share of the machine's memory a graph may take by default: 3/4.
const MACHINE_SHARE: (u64, u64) = (3, 4);

/// A limit on the bytes one evaluation may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub max_bytes: u64,
}

static PROCESS_DEFAULT: OnceLock<Budget> = OnceLock::new();

impl Budget {
    pub const fn bytes(max_bytes: u64) -> Self {
        Budget { max_bytes }
    }

    /// No limit (tests of the evaluators themselves).
    pub const UNLIMITED: Budget = Budget {
        max_bytes: u64::MAX,
    };

    /// 3/4 of the smallest of physical memory (`/proc/meminfo`), the cgroup v2 limit
    /// (`/sys/fs/cgroup/memory.max`) and the address-space limit (`/proc/self/limits`);
    /// [`FALLBACK_BYTES`] when none can be read.
    pub fn for_machine() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let limits = [
            read("/proc/meminfo").and_then(|t| meminfo_total(&t)),
            read("/sys/fs/cgroup/memory.max").and_then(|t| t.trim().parse::<u64>().ok()),
            read("/proc/self/limits").and_then(|t| address_space_limit(&t)),
        ];
        Budget::bytes(machine_budget(&limits))
    }

    /// The budget of entry points that take none: the one [`Budget::set_process_default`] set,
    /// else [`Budget::for_machine`] (read once).
    pub fn process_default() -> Self {
        *PROCESS_DEFAULT.get_or_init(Budget::for_machine)
    }

    /// Sets [`Budget::process_default`]; only the first call (before any use) takes effect, and
    /// it says whether it did.
    pub fn set_process_default(budget: Budget) -> bool {
        PROCESS_DEFAULT.set(budget).is_ok()
    }

    /// A byte count as written on a command line: digits with an optional binary suffix
    /// `K`, `M`, `G`, `T` (also `KB`, `KiB`, …; case-insensitive), e.g. `512M`, `4G`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |problem: ByteCountProblem| SpecError::BadByteCount {
            text: text.to_string(),
            problem,
        };
        let t = text.trim();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, suffix) = t.split_at(digits);
        if num.is_empty() {
            return Err(bad(ByteCountProblem::NoNumber));
        }
        let n: u64 = num.parse().map_err(|_| bad(ByteCountProblem::TooLarge))?;
        let shift = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(bad(ByteCountProblem::UnknownSuffix)),
        };
        n.checked_mul(1u64 << shift)
            .map(Budget::bytes)
            .ok_or_else(|| bad(ByteCountProblem::TooLarge))
    }
}

/// 3/4 of the smallest known limit, or [`FALLBACK_BYTES`].
fn machine_budget(limits: &[Option<u64>]) -> u64 {
    match limits.iter().flatten().min() {
        Some(&m) => m / MACHINE_SHARE.1 * MACHINE_SHARE.0,
        None => FALLBACK_BYTES,
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The soft `Max address space` of `/proc/self/limits` (`None` when unlimited).
fn address_space_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What a budget is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Values and forward workspaces only (`eval`).
    Eval,
    /// Values, gradients, and the larger of the forward and backward workspaces (`grad`,
    /// training, `check`).
    Grad,
}

/// What one node takes, in elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCost {
    /// The node's value (and any payload tensors it holds).
    pub value: u64,
    /// Its gradient (as large as the value).
    pub grad: u64,
    /// Engine workspace while its forward or VJP runs (patch matrices, padded copies).
    pub workspace: u64,
}

impl NodeCost {
    /// A node holding `value` elements and `workspace`, with a gradient of the value's size in
    /// [`Pass::Grad`].
    pub fn new(value: usize, workspace: usize, pass: Pass) -> Self {
        let v = value as u64;
        NodeCost {
            value: v,
            grad: if pass == Pass::Grad { v } else { 0 },
            workspace: workspace as u64,
        }
    }

    /// All of it, in elements (saturating: a sum past `u64` is over any budget anyway).
    pub fn elements(&self) -> u64 {
        self.value
            .saturating_add(self.grad)
            .saturating_add(self.workspace)
    }
}

/// The running total of a graph's nodes against a budget.
#[derive(Clone, Copy, Debug)]
pub struct Tally {
    budget: Budget,
    elem_bytes: u64,
    total: u64,
}

/// The node that took a tally over its budget: what it asked and where the total stood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget {
    /// The node's own bytes (value + gradient + workspace).
    pub node_bytes: u64,
    pub workspace_bytes: u64,
    /// The graph's total with this node.
    pub total_bytes: u64,
    pub limit: u64,
}

impl Tally {
    /// A tally of values with `elem_bytes` bytes per element (8 for f64).
    pub fn new(budget: Budget, elem_bytes: usize) -> Self {
        Tally {
            budget,
            elem_bytes: elem_bytes as u64,
            total: 0,
        }
    }

    /// Adds one node; an error (and the total unchanged) when it takes the total over budget.
    pub fn add(&mut self, cost: NodeCost) -> std::result::Result<(), OverBudget> {
        let bytes = |e: u64| e.saturating_mul(self.elem_bytes);
        let node_bytes = bytes(cost.elements());
        let total = self.total.saturating_add(node_bytes);
        if total > self.budget.max_bytes {
            return Err(OverBudget {
                node_bytes,
                workspace_bytes: bytes(cost.workspace),
                total_bytes: total,
                limit: self.budget.max_bytes,
            });
        }
        self.total = total;
        Ok(())
    }

    /// The bytes counted so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "needs {} bytes ({}, of which {} engine workspace), which takes the graph to \
             {} bytes, over the memory budget of {} bytes ({}; --max-memory)",
            self.node_bytes,
            human(self.node_bytes),
            human(self.workspace_bytes),
            self.total_bytes,
            self.limit,
            human(self.limit)
        )
    }
}

impl std::error::Error for OverBudget {}

/// Bytes as `N B` or `x.y KiB|MiB|GiB|TiB|PiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_is_four_gibibytes() {
        assert_eq!(FALLBACK_BYTES, 4 * 1024 * 1024 * 1024);
    }

    #[test]
    fn byte_counts_parse_with_binary_suffixes() {
        assert_eq!(Budget::parse("512").unwrap().max_bytes, 512);
        assert_eq!(Budget::parse("512M").unwrap().max_bytes, 512 << 20);
        assert_eq!(Budget::parse("4G").unwrap().max_bytes, 4 << 30);
        assert_eq!(Budget::parse("4gib").unwrap().max_bytes, 4 << 30);
        assert_eq!(Budget::parse("2K").unwrap().max_bytes, 2048);
        assert_eq!(Budget::parse("1T").unwrap().max_bytes, 1 << 40);
        use ByteCountProblem::*;
        for (bad, why) in [
            ("", NoNumber),
            ("G", NoNumber),
            ("-1", NoNumber),
            ("1.5G", UnknownSuffix),
            ("4X", UnknownSuffix),
            ("99999999999999999999", TooLarge),
            ("16777216T", TooLarge),
        ] {
            assert_eq!(
                Budget::parse(bad),
                Err(SpecError::BadByteCount {
                    text: bad.to_string(),
                    problem: why
                }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_machine_budget_is_three_quarters_of_the_smallest_limit() {
        assert_eq!(machine_budget(&[None, None, None]), FALLBACK_BYTES);
        assert_eq!(
            machine_budget(&[Some(16 << 30), None, Some(4 << 30)]),
            3 << 30
        );
        assert_eq!(
            machine_budget(&[Some(8 << 30), Some(1 << 30), None]),
            768 << 20
        );
    }

    #[test]
    fn proc_files_are_read() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:        1 kB\n";
        assert_eq!(meminfo_total(meminfo), Some(24_000_000 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         2147483648           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(2_147_483_648));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_limit(unlimited), None);
    }

    #[test]
    fn a_tally_refuses_the_node_that_crosses_the_limit_and_keeps_the_total() {
        // 100 bytes, f64: a node of 4 elements (value 4 + gradient 4 = 64 bytes) fits, the next
        // one does not, a smaller one after it still does
        let mut t = Tally::new(Budget::bytes(100), 8);
        t.add(NodeCost::new(4, 0, Pass::Grad)).unwrap();
        assert_eq!(t.total_bytes(), 64);
        let e = t.add(NodeCost::new(2, 1, Pass::Grad)).unwrap_err();
        assert_eq!(
            e,
            OverBudget {
                node_bytes: 40,
                workspace_bytes: 8,
                total_bytes: 104,
                limit: 100
            }
        );
        assert_eq!(t.total_bytes(), 64);
        t.add(NodeCost::new(2, 0, Pass::Grad)).unwrap();
        assert_eq!(t.total_bytes(), 96);
        // evaluation counts no gradients
        t.add(NodeCost::new(0, 0, Pass::Eval)).unwrap();
        assert_eq!(NodeCost::new(3, 2, Pass::Eval).elements(), 5);
    }

    #[test]
    fn human_names_bytes_in_binary_units_at_their_boundaries() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.0 KiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human((1 << 20) - 1), "1024.0 KiB");
        assert_eq!(human(1 << 20), "1.0 MiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
        assert_eq!(human(1 << 40), "1.0 TiB");
        assert_eq!(human(1 << 50), "1.0 PiB");
        // PiB is the largest unit: past it the number grows
        assert_eq!(human(1 << 60), "1024.0 PiB");
    }

    #[test]
    fn over_budget_says_what_the_node_needs_and_where_the_total_stands() {
        let e = OverBudget {
            node_bytes: 40,
            workspace_bytes: 2048,
            total_bytes: 104,
            limit: 3 << 20,
        };
        assert_eq!(
            e.to_string(),
            "needs 40 bytes (40 B, of which 2.0 KiB engine workspace), which takes the graph to \
             104 bytes, over the memory budget of 3145728 bytes (3.0 MiB; --max-memory)"
        );
    }

    #[test]
    fn a_tally_saturates_instead_of_wrapping() {
        let mut t = Tally::new(Budget::bytes(u64::MAX - 1), 8);
        let huge = NodeCost {
            value: u64::MAX / 2,
            grad: u64::MAX / 2,
            workspace: 5,
        };
        assert_eq!(t.add(huge).unwrap_err().total_bytes, u64::MAX);
        assert!(Tally::new(Budget::UNLIMITED, 8).add(huge).is_ok());
    }

    #[test]
    fn byte_counts_print_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(16 << 30), "16.0 GiB");
    }
}
