//! Shrinking a failing plan: delta debugging over its operation list
//! (drop chunks, halving their size, while the plan still fails), then
//! each crash replaced by the operation it wrapped, then each operation
//! dropped alone. Ids are chosen when an operation runs, so every
//! sub-list is a valid plan. Bounded by a number of runs.

use super::plan::{Op, Plan};

/// The shortest plan found that still fails (`fails` runs one).
pub fn shrink(plan: &Plan, budget: usize, fails: &mut dyn FnMut(&Plan) -> bool) -> Plan {
    let mut best = plan.clone();
    let mut runs = 0;
    let mut attempt = |candidate: &Plan, runs: &mut usize| -> bool {
        *runs += 1;
        fails(candidate)
    };
    let mut n = 2;
    while best.ops.len() >= 2 && runs < budget {
        let len = best.ops.len();
        let chunk = len.div_ceil(n);
        let mut reduced = None;
        for i in 0..n {
            let (lo, hi) = (i * chunk, ((i + 1) * chunk).min(len));
            if lo >= hi || runs >= budget {
                continue;
            }
            let mut c = best.clone();
            c.ops.drain(lo..hi);
            if attempt(&c, &mut runs) {
                reduced = Some(c);
                break;
            }
        }
        if let Some(c) = reduced {
            best = c;
            n = (n - 1).max(2);
        } else {
            if n >= len {
                break;
            }
            n = (n * 2).min(len);
        }
    }
    // Simpler operations: a crash that is not needed, then one at a time.
    let mut i = 0;
    while i < best.ops.len() && runs < budget {
        if let Op::Crash { op, .. } = &best.ops[i] {
            let mut c = best.clone();
            c.ops[i] = (**op).clone();
            if attempt(&c, &mut runs) {
                best = c;
            }
        }
        i += 1;
    }
    let mut i = 0;
    while i < best.ops.len() && runs < budget {
        let mut c = best.clone();
        c.ops.remove(i);
        if attempt(&c, &mut runs) {
            best = c;
        } else {
            i += 1;
        }
    }
    best
}
