//! The one value parser of every flag and argument that takes a whole
//! number (`--limit`, `--max-depth`, `--max-attempts`, item ids …).
//!
//! clap's own integer parsers answer a bad value with Rust's parse error
//! ("invalid digit found in string"). [`Whole`] answers with what was
//! expected and an example, in the words of the duration and size
//! parsers ([`spool::units::parse_whole`]):
//! `invalid value 'x' for '--max-depth <N>': expected a whole number of 1
//! or more, such as 1000`. An argument that uses it should also allow
//! negative numbers (`allow_negative_numbers = true`), so that `--limit
//! -3` reaches the parser instead of being taken for a flag.

use clap::builder::TypedValueParser;
use std::marker::PhantomData;

/// Parses a whole number of type `T` from `min` up to `max` (`None`:
/// whatever `T` holds), naming `example` in its errors.
pub struct Whole<T> {
    min: u64,
    max: Option<u64>,
    example: u64,
    ty: PhantomData<fn() -> T>,
}

// Derived impls would require `T: Clone`/`Copy`; none is needed.
impl<T> Clone for Whole<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Whole<T> {}

impl<T> Whole<T> {
    /// Any whole number `T` holds (0 included).
    pub const fn any(example: u64) -> Self {
        Self::at_least(0, example)
    }

    /// `min` or more.
    pub const fn at_least(min: u64, example: u64) -> Self {
        Whole {
            min,
            max: None,
            example,
            ty: PhantomData,
        }
    }

    /// From `min` to `max`, both included.
    pub const fn between(min: u64, max: u64, example: u64) -> Self {
        Whole {
            min,
            max: Some(max),
            example,
            ty: PhantomData,
        }
    }
}

/// The largest value of a type [`Whole`] parses into, named by its
/// "too large" error.
pub trait Largest {
    const LARGEST: u64;
}

impl Largest for u32 {
    const LARGEST: u64 = u32::MAX as u64;
}

impl Largest for u64 {
    const LARGEST: u64 = u64::MAX;
}

impl Largest for usize {
    const LARGEST: u64 = usize::MAX as u64;
}

impl<T: TryFrom<u64> + Largest> Whole<T> {
    fn parse(&self, s: &str) -> Result<T, String> {
        // A number too large names the largest one taken.
        let too_large = || {
            let max = self.max.map_or(T::LARGEST, |m| m.min(T::LARGEST));
            format!(
                "too large; expected {}",
                spool::units::whole_forms(self.min, Some(max), self.example)
            )
        };
        let n = match spool::units::parse_whole(s, self.min, self.max, self.example) {
            Err(e) if e.starts_with("too large") => return Err(too_large()),
            r => r?,
        };
        T::try_from(n).map_err(|_| too_large())
    }
}

impl<T> TypedValueParser for Whole<T>
where
    T: TryFrom<u64> + Largest + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        // clap's parser for a function renders the error as for every
        // other flag: "invalid value '…' for '--flag <N>': …".
        let this = *self;
        let f = move |s: &str| this.parse(s);
        f.parse_ref(cmd, arg, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_too_large_for_the_type_says_so() {
        assert_eq!(
            Whole::<u32>::at_least(1, 5).parse("4294967295"),
            Ok(u32::MAX)
        );
        assert_eq!(
            Whole::<u32>::at_least(1, 5).parse("4294967296"),
            Err("too large; expected a whole number from 1 to 4294967295, such as 5".to_string())
        );
        assert_eq!(
            Whole::<u64>::any(20).parse("99999999999999999999"),
            Err(
                "too large; expected a whole number up to 18446744073709551615, such as 20"
                    .to_string()
            )
        );
        assert_eq!(
            Whole::<usize>::between(1, 256, 8).parse("257"),
            Err("too large; expected a whole number from 1 to 256, such as 8".to_string())
        );
    }
}
