//! Link options of the `spool` binary.
//!
//! On Linux the binary is linked as a position-dependent executable
//! (`-no-pie`), as Go links its programs by default: a position-independent
//! one has ~7,500 pointers that the dynamic loader relocates at every start,
//! which copies and writes ~30 pages of the binary and made ~40 of the ~260
//! page faults of a one-shot `spool enqueue`; without them the call is ~5%
//! faster (docs/benchmarks.md, "One-shot enqueue and the process"). The cost
//! is address-space layout randomisation of the binary's own image (shared
//! libraries, heap and stack stay randomised). Set `SPOOL_BUILD_PIE=1` when
//! building to keep a position-independent executable.

fn main() {
    println!("cargo:rerun-if-env-changed=SPOOL_BUILD_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if linux && std::env::var_os("SPOOL_BUILD_PIE").is_none() {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
