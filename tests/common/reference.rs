//! How the reference `FileOfflineQueue` reads an NDJSON spool file, for
//! the suites that check what `spool` writes is what it reads.

use std::collections::BTreeMap;
use std::path::Path;

/// What the reference `FileOfflineQueue` reads from a file: last write
/// wins per id, only its own fields. Panics on a line it would reject.
pub fn reference_view(path: &Path) -> BTreeMap<u64, (String, String, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut live = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_u64().unwrap();
        match v["op"].as_str().unwrap() {
            "put" => {
                live.insert(
                    id,
                    (
                        v["payload"].as_str().unwrap().to_string(),
                        v["idempotencyKey"].as_str().unwrap().to_string(),
                        v["attempts"].as_u64().unwrap(),
                    ),
                );
            }
            "done" => {
                live.remove(&id);
            }
            other => panic!("the reference knows no op {other:?}"),
        }
    }
    live
}

/// The reference's part of a `put` line `spool` writes: its five fields,
/// in its order, first.
pub fn reference_prefix(id: u64, payload: &str, key: &str, attempts: u32) -> String {
    format!(
        "{{\"op\":\"put\",\"id\":{id},\"payload\":{},\"idempotencyKey\":{},\"attempts\":{attempts}",
        serde_json::to_string(payload).unwrap(),
        serde_json::to_string(key).unwrap()
    )
}
