//! Fuzz target `units`: see `fuzz_common::units` for what it checks.
#![cfg_attr(not(feature = "afl"), no_main)]

#[path = "../../tests/fuzz_common/mod.rs"]
mod fuzz_common;

#[cfg(not(feature = "afl"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::units(data));

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_common::units(data));
}
