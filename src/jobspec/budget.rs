//! The budget of one job file's evaluation: steps, bytes of values produced, and wall time.
//!
//! HCL is small to write and can be large to evaluate: three nested `for` expressions over
//! `range(1024)` are a billion iterations, and twenty locals that each double a string are a
//! gigabyte. The parser charges its work to a budget held by the evaluating thread:
//! - a **step** for every reference to a parse-time value (`var.*`, `local.*`, an iterator)
//!   and every function call, and one per element of every `for` collection iterated;
//! - the **bytes** of every value a reference or a function call produces (an estimate of
//!   its size in memory), so copies of a large value are paid for each time;
//! - the **wall time** since the evaluation started, checked at every charge.
//!
//! Charges happen through two functions the parser wraps around expressions
//! ([`super::funcs::CHARGE`] and [`super::funcs::FOR_ORDER`]); a charge past a limit is an
//! error that names the limit, and the evaluation stops there. Outside [`with_budget`]
//! nothing is charged.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use hcl::Value;

/// The largest job file read (Nomad's `job_max_source_size` is 1 MB), and the largest
/// file `file()` reads.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// The limits of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalBudget {
    /// Steps (references, function calls, `for` elements).
    pub max_steps: u64,
    /// Bytes of values produced by references and function calls, summed.
    pub max_bytes: u64,
    /// Wall time.
    pub max_duration: Duration,
}

impl Default for EvalBudget {
    /// A million steps, 64 MiB, 10 s: every job file of Nomad's own suites uses less than a
    /// thousandth of the first two.
    fn default() -> Self {
        EvalBudget {
            max_steps: 1_000_000,
            max_bytes: 64 << 20,
            max_duration: Duration::from_secs(10),
        }
    }
}

struct Spent {
    budget: EvalBudget,
    steps: u64,
    bytes: u64,
    started: Instant,
}

thread_local! {
    static SPENT: RefCell<Option<Spent>> = const { RefCell::new(None) };
}

/// Runs `f` with `budget` charged by the evaluation on this thread; the budget is removed
/// afterwards, also when `f` panics.
pub fn with_budget<T>(budget: EvalBudget, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Spent>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            SPENT.with(|s| *s.borrow_mut() = previous);
        }
    }
    let previous = SPENT.with(|s| {
        s.borrow_mut().replace(Spent {
            budget,
            steps: 0,
            bytes: 0,
            started: Instant::now(),
        })
    });
    let _reset = Reset(previous);
    f()
}

/// Charges `steps` and `bytes`; the limit passed, if one is.
pub fn charge(steps: u64, bytes: u64) -> Result<(), String> {
    SPENT.with(|s| {
        let mut s = s.borrow_mut();
        let Some(spent) = s.as_mut() else {
            return Ok(());
        };
        spent.steps = spent.steps.saturating_add(steps);
        spent.bytes = spent.bytes.saturating_add(bytes);
        let b = spent.budget;
        if spent.steps > b.max_steps {
            return Err(format!(
                "the evaluation took more than its budget of {} steps (references, function \
                 calls and for-expression elements)",
                b.max_steps
            ));
        }
        if spent.bytes > b.max_bytes {
            return Err(format!(
                "the evaluation produced more than its budget of {} MiB of values",
                b.max_bytes >> 20
            ));
        }
        if spent.started.elapsed() > b.max_duration {
            return Err(format!(
                "the evaluation ran longer than its budget of {} s",
                b.max_duration.as_secs_f64()
            ));
        }
        Ok(())
    })
}

/// Charges a value just produced: one step and its size.
pub fn charge_value(v: &Value) -> Result<(), String> {
    charge(1, size_of_value(v))
}

/// An estimate of a value's size in memory, in bytes.
pub fn size_of_value(v: &Value) -> u64 {
    const SLOT: u64 = 32;
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => SLOT,
        Value::String(s) => SLOT + s.len() as u64,
        Value::Array(items) => SLOT + items.iter().map(size_of_value).sum::<u64>(),
        Value::Object(map) => {
            SLOT + map
                .iter()
                .map(|(k, v)| SLOT + k.len() as u64 + size_of_value(v))
                .sum::<u64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_outside_a_budget_are_free() {
        assert_eq!(charge(u64::MAX, u64::MAX), Ok(()));
    }

    #[test]
    fn each_limit_is_named_when_passed_and_the_budget_is_removed_after() {
        let small = EvalBudget {
            max_steps: 10,
            max_bytes: 1 << 20,
            max_duration: Duration::from_secs(60),
        };
        let e = with_budget(small, || charge(11, 0)).unwrap_err();
        assert!(e.contains("10 steps"), "{e}");
        let e = with_budget(small, || {
            charge(1, 1 << 19)?;
            charge(1, 1 << 19)?;
            charge(1, 1)
        })
        .unwrap_err();
        assert!(e.contains("1 MiB"), "{e}");
        let quick = EvalBudget {
            max_duration: Duration::from_millis(1),
            ..small
        };
        let e = with_budget(quick, || {
            std::thread::sleep(Duration::from_millis(5));
            charge(1, 0)
        })
        .unwrap_err();
        assert!(e.contains("longer than"), "{e}");
        assert_eq!(charge(u64::MAX, u64::MAX), Ok(()));
    }

    #[test]
    fn a_budget_is_removed_when_the_evaluation_panics() {
        let small = EvalBudget {
            max_steps: 1,
            ..EvalBudget::default()
        };
        let r = std::panic::catch_unwind(|| with_budget(small, || panic!("boom")));
        assert!(r.is_err());
        assert_eq!(charge(5, 0), Ok(()));
    }

    #[test]
    fn sizes_grow_with_contents() {
        let small = Value::from("a");
        let big = Value::from("a".repeat(1000));
        assert!(size_of_value(&big) > size_of_value(&small) + 900);
        let list = Value::Array(vec![big.clone(), big]);
        assert!(size_of_value(&list) > 2000);
    }
}
