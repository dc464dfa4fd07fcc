//! Operator maintenance through the real binary, on both durable
//! backends: `compact`, `checkpoint`, `verify`, `export` and `import` —
//! normal use, `--json` shapes, and every exit code each can produce.

mod cli_common;

use cli_common::*;
use spool::{AttemptUpdate, OpenMode, Timestamp};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A spool with every kind of item: plain, keyed, binary, held, retrying
/// (attempts, next retry, last error), dead (keyed), and one done item.
/// Returns the ids of the pending items.
fn populate(env: &Env) -> Vec<u64> {
    let s = env.lib(OpenMode::Create);
    let plain = s.enqueue(b"plain, \"quoted\"\nline two", "").unwrap().id;
    let keyed = s.enqueue(b"keyed", "k-1").unwrap().id;
    let binary = s.enqueue(b"\xff\x00bin\x1b[0m", "bin").unwrap().id;
    let held = s.enqueue(b"held", "").unwrap().id;
    s.set_held(&[held], true).unwrap();
    let retrying = s.enqueue(b"retrying", "r").unwrap().id;
    s.record_attempt(
        retrying,
        &AttemptUpdate {
            attempts: 3,
            next_retry_at: Some(Timestamp::now().saturating_add(Duration::from_secs(3600))),
            last_error: Some("HTTP 503\nService Unavailable".into()),
        },
    )
    .unwrap();
    let dead = s.enqueue(b"to die", "dead-key").unwrap().id;
    s.set_attempts(dead, 5).unwrap();
    s.dead_letter(dead, "rejected: 400 bad field").unwrap();
    let done = s.enqueue(b"done", "").unwrap().id;
    s.mark_done(&[done]).unwrap();
    vec![plain, keyed, binary, held, retrying]
}

/// `spool export` parsed.
fn export(env: &Env) -> Vec<serde_json::Value> {
    records_of(&env.run(&["export"]).success().get_output().stdout)
}

/// The records of an export: its lines without the spool header (the
/// first line, `{"spool": …}`).
fn records_of(out: &[u8]) -> Vec<serde_json::Value> {
    let mut v = ndjson(out);
    if v.first().is_some_and(|h| h.get("spool").is_some()) {
        v.remove(0);
    }
    v
}

/// Every file of the spool's directory with its bytes, except SQLite's
/// shared-memory index (readers update its read marks).
fn data_snapshot(env: &Env) -> Vec<(PathBuf, Vec<u8>)> {
    env.snapshot()
        .into_iter()
        .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
        .collect()
}

fn append(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

/// Replace the middle record of an NDJSON main file, or the body of a
/// SQLite database, with garbage.
fn corrupt(env: &Env) {
    if env.is_ndjson() {
        let text = std::fs::read_to_string(&env.path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 3);
        lines[1] = "{\"op\":\"put\",\"id\":2,\"payl";
        std::fs::write(&env.path, lines.join("\n") + "\n").unwrap();
    } else {
        for s in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(env.side(s));
        }
        let mut bytes = b"SQLite format 3\0".to_vec();
        bytes.extend((0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        std::fs::write(&env.path, bytes).unwrap();
    }
}

// ------------------------------------------------------------- compact

#[test]
fn compact_keeps_every_item_and_reports_sizes() {
    each_backend(|env| {
        populate(env);
        for i in 0..200 {
            let id = env
                .lib(OpenMode::ReadWrite)
                .enqueue(format!("gone {i}").as_bytes(), "")
                .unwrap()
                .id;
            env.lib(OpenMode::ReadWrite).mark_done(&[id]).unwrap();
        }
        let before = export(env);
        let a = env.run(&["--json", "compact"]).success();
        let r = json_out(&a);
        assert_eq!(r["spool"], env.path.display().to_string());
        assert_eq!(
            r["backend"],
            if env.is_ndjson() { "file" } else { "sqlite" }
        );
        assert_eq!(
            (r["pending"].as_u64(), r["dead_letters"].as_u64()),
            (Some(5), Some(1))
        );
        assert_eq!(r["high_water"], 207);
        let (b, af) = (
            r["bytes_before"].as_u64().unwrap(),
            r["bytes_after"].as_u64().unwrap(),
        );
        assert!(af < b, "{r}");
        assert_eq!(r["bytes_saved"].as_u64().unwrap(), b - af);
        if env.is_ndjson() {
            // Five puts and the high-water done line.
            assert_eq!(r["records_after"], 6);
            assert!(r["records_before"].as_u64().unwrap() > 400, "{r}");
            assert!(r["checkpoint"].is_null());
            let text = std::fs::read_to_string(&env.path).unwrap();
            assert_eq!(text.lines().last().unwrap(), "{\"op\":\"done\",\"id\":207}");
        } else {
            assert!(r["records_before"].is_null());
            assert_eq!(r["checkpoint"]["mode"], "truncate");
            assert_eq!(r["checkpoint"]["complete"], true);
            assert_eq!(
                std::fs::metadata(env.side("-wal"))
                    .map(|m| m.len())
                    .unwrap_or(0),
                0
            );
        }
        assert_eq!(
            export(env),
            before,
            "compaction changed what the spool holds"
        );
        // Human output.
        let a = env.run(&["compact"]).success();
        let out = stdout(&a);
        assert!(
            out.contains("kept        5 pending, 1 dead letters, id high-water mark 207"),
            "{out}"
        );
        env.run(&["verify"]).success();
    });
}

#[test]
fn compaction_twice_with_a_reopen_between_never_reissues_an_id() {
    each_backend(|env| {
        for p in ["a", "b", "c"] {
            env.enqueue(p);
        }
        env.run(&["done", "1", "2", "3"]).success();
        env.run(&["compact"]).success();
        // A new process (a reopen) continues above the mark.
        assert_eq!(env.enqueue("d"), 4);
        env.run(&["done", "4"]).success();
        env.run(&["compact"]).success();
        env.run(&["compact"]).success();
        assert_eq!(env.enqueue("e"), 5);
        assert_eq!(env.size(), 1);
        if env.is_ndjson() {
            env.run(&["done", "5"]).success();
            env.run(&["compact"]).success();
            assert_eq!(
                std::fs::read_to_string(&env.path).unwrap(),
                "{\"op\":\"done\",\"id\":5}\n",
                "an empty spool keeps only its high-water mark"
            );
            assert_eq!(env.enqueue("f"), 6);
        }
    });
}

#[test]
fn compaction_drops_a_torn_tail() {
    let env = Env::new("spool.ndjson");
    for p in ["a", "b", "c"] {
        env.enqueue(p);
    }
    env.run(&["done", "2"]).success();
    append(
        &env.path,
        b"{\"op\":\"put\",\"id\":4,\"payload\":\"never comm",
    );
    let a = env.run(&["--json", "compact"]).success();
    let err = stderr(&a);
    assert!(err.contains("torn trailing line 5"), "{err}");
    let r = json_out(&a);
    assert_eq!(r["pending"], 2);
    assert_eq!(r["high_water"], 3, "the torn line was never committed");
    let notices = r["notices"].as_array().unwrap();
    assert!(
        notices.iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("cut a torn trailing line (line 5")),
        "{r}"
    );
    let text = std::fs::read_to_string(&env.path).unwrap();
    assert!(!text.contains("never comm"), "{text}");
    let payloads: Vec<_> = env.drain().iter().map(|v| v["payload"].clone()).collect();
    assert_eq!(payloads, ["a", "c"]);
    env.run(&["verify"]).success();
    assert_eq!(env.enqueue("d"), 4);
}

#[test]
fn compact_exit_codes() {
    each_backend(|env| {
        // 66: missing, and not created.
        assert_error(env.run(&["compact"]), 66, &env.path);
        assert!(env.files().is_empty());
        // 75: another process holds the lock past --wait.
        env.enqueue("x");
        let holder = if env.is_ndjson() {
            let f = std::fs::File::open(&env.path).unwrap();
            f.lock().unwrap();
            Box::new(f) as Box<dyn std::any::Any>
        } else {
            let c = rusqlite::Connection::open(&env.path).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            Box::new(c) as Box<dyn std::any::Any>
        };
        let a = assert_error(env.run(&["compact", "--wait", "200ms"]), 75, &env.path);
        assert!(stderr(&a).contains("busy"), "{}", stderr(&a));
        drop(holder);
        assert_eq!(env.size(), 1);
        // 64: a bad duration.
        env.run(&["compact", "--wait", "soon"]).code(64).stdout("");
        // 65: corrupt, left unchanged.
        env.enqueue("y");
        env.enqueue("z");
        corrupt(env);
        let before = env.snapshot();
        assert_error(env.run(&["compact"]), 65, &env.path);
        assert_eq!(env.snapshot(), before);
    });
}

/// A reference writer's NDJSON spool (no meta file, no index) damaged in
/// the middle: every one-shot command that would write it fails with 65
/// and leaves the directory exactly as it was — no meta file, no index.
#[test]
fn one_shot_writes_leave_a_damaged_reference_spool_as_it_was() {
    let env = Env::new("ref.ndjson");
    let bytes = b"{\"op\":\"put\",\"id\":1,\"payload\":\"a\",\"idempotencyKey\":\"\",\"attempts\":0,\"enqueuedAt\":1}\n\
                  not json\n\
                  {\"op\":\"put\",\"id\":2,\"payload\":\"b\",\"idempotencyKey\":\"\",\"attempts\":0,\"enqueuedAt\":1}\n";
    std::fs::write(&env.path, bytes).unwrap();
    for args in [
        &["enqueue", "c"][..],
        &["done", "1"],
        &["hold", "1"],
        &["release", "1"],
        &["attempts", "1", "--set", "3"],
    ] {
        assert_error(env.run(args), 65, &env.path);
        assert_eq!(env.files(), ["ref.ndjson"], "after {args:?}");
        assert_eq!(std::fs::read(&env.path).unwrap(), bytes, "after {args:?}");
    }
    // With no ids to act on, the spool is still checked: the damage is
    // reported, not passed over with a success.
    for cmd in ["done", "hold", "release"] {
        assert_error(env.run(&[cmd, "-"]), 65, &env.path);
        assert_eq!(std::fs::read(&env.path).unwrap(), bytes, "after {cmd} -");
    }
}

// ---------------------------------------------------------- checkpoint

#[test]
fn checkpoint_reports_frames_and_sizes() {
    let env = Env::new("spool.db");
    for i in 0..50 {
        env.enqueue(&format!("item {i}"));
    }
    let a = env.run(&["--json", "checkpoint"]).success();
    let r = json_out(&a);
    assert_eq!(r["spool"], env.path.display().to_string());
    assert_eq!(r["mode"], "passive");
    assert_eq!(r["busy"], false);
    assert!(r["wal_frames"].as_i64().unwrap() > 0, "{r}");
    assert_eq!(r["checkpointed_frames"], r["wal_frames"]);
    assert!(r["wal_bytes_before"].as_u64().unwrap() > 0);
    assert_eq!(
        (r["complete"].as_bool(), r["blocked"].is_null()),
        (Some(true), true)
    );
    let a = env.run(&["checkpoint", "--mode", "truncate"]).success();
    let out = stdout(&a);
    assert!(out.contains("-> 0 B"), "{out}");
    assert!(out.contains("result    complete"), "{out}");
    assert_eq!(std::fs::metadata(env.side("-wal")).unwrap().len(), 0);
    assert_eq!(env.size(), 50);
}

#[test]
fn checkpoint_blocked_by_a_reader_says_so_and_exits_0() {
    let env = Env::new("spool.db");
    for i in 0..20 {
        env.enqueue(&format!("item {i}"));
    }
    env.run(&["checkpoint", "--mode", "truncate"]).success();
    // Another connection holds a read transaction on the current
    // snapshot; everything committed after it must stay in the WAL.
    let reader = rusqlite::Connection::open(&env.path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let n: i64 = reader
        .query_row("SELECT count(*) FROM morph_offline_queue", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 20);
    env.run_in(&["enqueue", "--stdin", "--lines"], "x\ny\nz\n")
        .success();
    for mode in ["passive", "truncate"] {
        let a = env
            .run(&["--json", "checkpoint", "--mode", mode, "--wait", "100ms"])
            .success();
        let r = json_out(&a);
        assert_eq!(r["complete"], false, "{mode}: {r}");
        assert_eq!(r["blocked"], "reader", "{mode}: {r}");
        assert!(
            r["checkpointed_frames"].as_i64() < r["wal_frames"].as_i64(),
            "{mode}: {r}"
        );
        assert!(r["wal_bytes_after"].as_u64().unwrap() > 0, "{mode}: {r}");
        assert!(r["note"].as_str().unwrap().contains("reader"), "{r}");
        if mode == "truncate" {
            assert_eq!(r["busy"], true, "{r}");
        }
    }
    let a = env
        .run(&["checkpoint", "--mode", "truncate", "--wait", "100ms"])
        .success();
    let out = stdout(&a);
    assert!(out.contains("busy      yes"), "{out}");
    assert!(out.contains("blocked by a reader"), "{out}");
    assert!(stderr(&a).contains("not an error"), "{}", stderr(&a));
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    let r = json_out(
        &env.run(&["--json", "checkpoint", "--mode", "truncate"])
            .success(),
    );
    assert_eq!(
        (r["complete"].as_bool(), r["busy"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    assert_eq!(r["wal_bytes_after"], 0);
    assert_eq!(env.size(), 23);
}

#[test]
fn checkpoint_exit_codes() {
    each_backend(|env| {
        assert_error(env.run(&["checkpoint"]), 66, &env.path);
        assert!(env.files().is_empty());
        env.enqueue("x");
        env.run(&["checkpoint", "--mode", "sometimes"])
            .code(64)
            .stdout("");
        if env.is_ndjson() {
            append(&env.path, b"{\"op\":\"put\",\"id\":2,\"pay");
            let before = env.snapshot();
            let a = assert_error(env.run(&["checkpoint"]), 64, &env.path);
            let err = stderr(&a);
            assert!(
                err.contains("no WAL") && err.contains("spool compact"),
                "{err}"
            );
            assert_eq!(env.snapshot(), before, "not even the torn tail is cut");
        } else {
            env.run(&["checkpoint"]).success();
            corrupt(env);
            assert_error(env.run(&["checkpoint"]), 65, &env.path);
        }
    });
}

// -------------------------------------------------------------- verify

#[test]
fn verify_a_healthy_spool() {
    each_backend(|env| {
        populate(env);
        let before = data_snapshot(env);
        let a = env.run(&["verify"]).success();
        let out = stdout(&a);
        assert!(out.contains(": healthy"), "{out}");
        assert!(out.contains("5 pending, 1 dead"), "{out}");
        let r = json_out(&env.run(&["--json", "verify"]).success());
        assert_eq!(
            (r["healthy"].as_bool(), r["repairable"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(
            (r["pending"].as_u64(), r["dead_letters"].as_u64()),
            (Some(5), Some(1))
        );
        assert_eq!(
            r["backend"],
            if env.is_ndjson() { "file" } else { "sqlite" }
        );
        assert!(r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["severity"] != "damage"));
        assert_eq!(r["repaired"], serde_json::json!([]));
        assert_eq!(data_snapshot(env), before, "verify changed the spool");
        // --repair on a healthy spool changes nothing either.
        env.run(&["verify", "--repair"]).success();
        assert_eq!(export(env).len(), 6);
    });
}

#[test]
fn verify_reports_a_torn_tail_and_repair_cuts_only_it() {
    let env = Env::new("spool.ndjson");
    populate(&env);
    let main = std::fs::read(&env.path).unwrap();
    let dead = std::fs::read(env.side(".dead")).unwrap();
    append(&env.path, b"{\"op\":\"put\",\"id\":8,\"payload\":\"half");
    append(&env.side(".dead"), b"{\"op\":\"pu");
    let before = env.snapshot();
    // Without --repair: the findings on stdout, exit 65, nothing touched.
    let a = env.run(&["verify"]).code(65);
    let out = stdout(&a);
    assert!(
        out.contains("damaged (2 problems; `spool verify --repair` fixes it)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("DAMAGE  {}:", env.path.display())),
        "{out}"
    );
    assert!(out.contains("torn trailing line"), "{out}");
    assert!(
        stderr(&a).starts_with("spool: error: verify "),
        "{}",
        stderr(&a)
    );
    let r = json_out(&env.run(&["--json", "verify"]).code(65));
    assert_eq!(
        (r["healthy"].as_bool(), r["repairable"].as_bool()),
        (Some(false), Some(true))
    );
    let damage: Vec<_> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "damage")
        .collect();
    assert_eq!(damage.len(), 2);
    assert!(damage
        .iter()
        .all(|f| f["repairable"] == true && f["line"].is_u64()));
    assert_eq!(env.snapshot(), before);
    // Read-only commands leave the tail alone too.
    env.run(&["export"]).success();
    env.run(&["dlq", "list"]).success();
    assert_eq!(env.snapshot(), before);
    // --repair says what it cuts, cuts it, checks again: exit 0.
    let a = env.run(&["--json", "verify", "--repair"]).success();
    let err = stderr(&a);
    assert!(
        err.contains(&format!("of {} (34 bytes", env.path.display())),
        "{err}"
    );
    assert!(err.contains(".dead (9 bytes"), "{err}");
    let r = json_out(&a);
    assert_eq!(r["healthy"], true);
    let repaired = r["repaired"].as_array().unwrap();
    assert_eq!(repaired.len(), 2, "{r}");
    assert_eq!(std::fs::read(&env.path).unwrap(), main);
    assert_eq!(std::fs::read(env.side(".dead")).unwrap(), dead);
    assert_eq!(export(&env).len(), 6);
}

#[test]
fn verify_reports_corruption_and_repair_does_not_touch_it() {
    each_backend(|env| {
        for p in ["first", "second", "third"] {
            env.enqueue(p);
        }
        corrupt(env);
        if env.is_ndjson() {
            // A torn tail as well: --repair must not cut even that while
            // other damage is there.
            append(&env.path, b"{\"op\":");
        }
        let before = env.snapshot();
        for args in [&["verify"][..], &["verify", "--repair"]] {
            let a = env.run(args).code(65);
            let out = stdout(&a);
            assert!(out.contains(": damaged"), "{out}");
            assert!(out.contains("DAMAGE"), "{out}");
            if env.is_ndjson() {
                assert!(
                    out.contains(&format!("{}:2: malformed line", env.path.display())),
                    "{out}"
                );
            }
            if args.len() == 2 {
                assert!(out.contains("repair  nothing was changed"), "{out}");
            }
            let err = stderr(&a);
            assert!(err.starts_with("spool: error: verify"), "{err}");
            assert!(
                err.contains("hint: restore the spool from a backup"),
                "{err}"
            );
            assert_eq!(env.snapshot(), before, "{args:?} changed a damaged spool");
        }
        let r = json_out(&env.run(&["--json", "verify", "--repair"]).code(65));
        assert_eq!(r["healthy"], false);
        assert!(r["repair_refused"].is_string(), "{r}");
        assert_eq!(r["repaired"], serde_json::json!([]));
        assert_eq!(env.snapshot(), before);
    });
}

#[test]
fn verify_exit_codes() {
    each_backend(|env| {
        for args in [&["verify"][..], &["verify", "--repair"]] {
            let a = assert_error(env.run(args), 66, &env.path);
            assert!(stderr(&a).contains("no spool exists"), "{}", stderr(&a));
            assert!(env.files().is_empty(), "{args:?} created {:?}", env.files());
        }
        env.run(&["verify", "--fix"]).code(64).stdout("");
    });
}

// ------------------------------------------------------ export / import

#[test]
fn export_writes_every_state_and_never_creates() {
    each_backend(|env| {
        assert_error(env.run(&["export"]), 66, &env.path);
        assert!(env.files().is_empty());
        let pending = populate(env);
        let recs = export(env);
        let ids: Vec<u64> = recs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [pending.clone(), vec![6]].concat());
        let states: Vec<&str> = recs.iter().map(|r| r["state"].as_str().unwrap()).collect();
        assert_eq!(
            states,
            ["pending", "pending", "pending", "held", "pending", "dead"]
        );
        assert_eq!(recs[0]["payload"], "plain, \"quoted\"\nline two");
        assert_eq!(recs[2]["payload_base64"], "/wBiaW4bWzBt");
        assert!(recs[2].get("payload").is_none());
        assert_eq!(recs[4]["attempts"], 3);
        assert_eq!(recs[4]["last_error"], "HTTP 503\nService Unavailable");
        assert!(recs[4]["next_retry_at"].is_string());
        assert_eq!(recs[5]["key"], "dead-key");
        assert_eq!(recs[5]["attempts"], 5);
        assert_eq!(recs[5]["last_error"], "rejected: 400 bad field");
        assert!(recs[5]["dead_at"].is_string());
        assert!(recs[..5].iter().all(|r| r.get("dead_at").is_none()));
        // -o replaces a file atomically: no temporary file left, nothing
        // on stdout, a note on stderr.
        let out = env.dir.path().join("all.export");
        std::fs::write(&out, "old contents").unwrap();
        let a = env
            .cmd()
            .arg("export")
            .arg("-o")
            .arg(&out)
            .assert()
            .success()
            .stdout("");
        assert!(
            stderr(&a).contains("exported 6 records (4 pending, 1 held, 1 dead)"),
            "{}",
            stderr(&a)
        );
        assert_eq!(records_of(&std::fs::read(&out).unwrap()), recs);
        assert!(
            !env.files().iter().any(|f| f.contains(".tmp")),
            "{:?}",
            env.files()
        );
        let a = env
            .cmd()
            .args(["--json", "export", "-o"])
            .arg(&out)
            .assert()
            .success();
        assert_eq!(json_out(&a)["records"], 6);
        // 73: the output's directory is missing.
        let nowhere = env.dir.path().join("no/such/dir/x.ndjson");
        let a = env.cmd().arg("export").arg("-o").arg(&nowhere).assert();
        assert_error(a, 73, &env.path);
        // 65: a corrupt spool.
        corrupt(env);
        assert_error(env.run(&["export"]), 65, &env.path);
    });
}

/// Export `from`, import into `to` (new), and check that `to` exports
/// exactly the same records.
fn round_trip(from: &Env, to: &Env) -> Vec<serde_json::Value> {
    let dump = from.dir.path().join("dump.ndjson");
    from.cmd()
        .arg("export")
        .arg("-o")
        .arg(&dump)
        .assert()
        .success();
    let a = to
        .cmd()
        .args(["--json", "import"])
        .arg(&dump)
        .assert()
        .success();
    let r = json_out(&a);
    assert_eq!(
        (
            r["records"].as_u64(),
            r["imported"].as_u64(),
            r["kept_ids"].as_u64()
        ),
        (Some(6), Some(6), Some(6)),
        "{r}"
    );
    assert_eq!(
        (
            r["pending"].as_u64(),
            r["held"].as_u64(),
            r["dead"].as_u64()
        ),
        (Some(4), Some(1), Some(1))
    );
    let theirs = export(to);
    let mut ours = export(from);
    // A key-less record comes in with the key it was sent under from
    // `from`: `<uuid>:<id>`.
    let uuid = stdout(&from.run(&["config", "uuid"]).success())
        .trim()
        .to_string();
    for r in &mut ours {
        if r["key"] == "" {
            r["key"] = format!("{uuid}:{}", r["id"]).into();
        }
    }
    assert_eq!(theirs, ours, "records differ after the round trip");
    theirs
}

#[test]
fn export_import_round_trip_across_backends() {
    let db = Env::new("spool.db");
    populate(&db);
    let nd = Env::new("spool.ndjson");
    let recs = round_trip(&db, &nd);
    // And back into a fresh SQLite spool.
    let db2 = Env::new("again.db");
    assert_eq!(round_trip(&nd, &db2), recs);
    // The imported spools work: the held item is held, the dead letter
    // is a dead letter, keys still dedup, payload bytes are exact.
    for env in [&nd, &db2] {
        let out = env
            .run(&["show", "3", "--raw"])
            .success()
            .get_output()
            .stdout
            .clone();
        assert_eq!(out, b"\xff\x00bin\x1b[0m");
        env.run(&["--json", "enqueue", "--key", "k-1", "again"])
            .success()
            .stdout("{\"id\":2,\"deduplicated\":true}\n");
        assert_eq!(
            json_out(&env.run(&["--json", "stats"]).success())["held"],
            1
        );
        env.run(&["dlq", "show", "6"]).success();
        assert_eq!(env.enqueue("new"), 7);
    }
}

#[test]
fn import_into_a_used_spool_renumbers_and_dedups() {
    each_backend(|env| {
        env.enqueue_key("mine", "k-1");
        env.enqueue("two");
        env.enqueue("three");
        let input = concat!(
            "{\"id\":2,\"payload\":\"low id\",\"state\":\"pending\"}\n",
            "\n",
            "{\"id\":5,\"payload\":\"dup\",\"key\":\"k-1\",\"state\":\"pending\"}\n",
            "{\"id\":9,\"payload_base64\":\"/w==\",\"key\":\"b\",\"attempts\":2,\"state\":\"held\",\"held\":true}\n",
            "{\"id\":10,\"payload\":\"dead\",\"dead_at\":\"2026-01-02T03:04:05.000Z\",\"last_error\":\"no\"}\n",
        );
        let a = env.run_in(&["--json", "import", "-"], input).success();
        let r = json_out(&a);
        assert_eq!(
            (
                r["records"].as_u64(),
                r["imported"].as_u64(),
                r["kept_ids"].as_u64()
            ),
            (Some(4), Some(3), Some(2)),
            "{r}"
        );
        assert_eq!(r["renumbered"], serde_json::json!([{"from": 2, "to": 4}]));
        assert_eq!(
            r["deduplicated"],
            serde_json::json!([{"from": 5, "existing": 1, "key": "k-1", "state": "pending"}])
        );
        assert!(
            stderr(&a)
                .contains("record 5 deduplicated: pending item 1 already carries its key k-1"),
            "{}",
            stderr(&a)
        );
        let recs = export(env);
        let ids: Vec<(u64, &str)> = recs
            .iter()
            .map(|r| (r["id"].as_u64().unwrap(), r["state"].as_str().unwrap()))
            .collect();
        assert_eq!(
            ids,
            [
                (1, "pending"),
                (2, "pending"),
                (3, "pending"),
                (4, "pending"),
                (9, "held"),
                (10, "dead")
            ]
        );
        assert_eq!(recs[4]["attempts"], 2);
        assert_eq!(recs[5]["dead_at"], "2026-01-02T03:04:05.000Z");
        // Human output.
        let a = env
            .run_in(&["import", "-"], "{\"id\":1,\"payload\":\"x\"}\n")
            .success();
        let out = stdout(&a);
        assert!(out.starts_with("imported 1 of 1 records (1 pending, 0 held, 0 dead, 0 delivered): 0 kept their ids, 1 renumbered"), "{out}");
        assert!(out.contains("renumbered 1 -> 11"), "{out}");
    });
}

/// SPEC §3: importing the same export twice adds nothing twice, into a
/// fresh spool of every backend — pending and held records (their keys,
/// or the `<source-uuid>:<source-id>` key of a key-less one, are
/// pending), dead letters (keyed or not: a dead record's key is a dead
/// letter's) and retained delivered items alike. The second import is a
/// dedup hit for every record, reported per record on stderr and in
/// `--json`; `size`, `dlq list` and `list --state delivered` are
/// unchanged.
#[test]
fn importing_the_same_export_twice_adds_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.db");
    {
        let s = spool::Spool::open(&source, &spool::OpenOptions::new(OpenMode::Create)).unwrap();
        s.set_retain(Some(Duration::from_secs(86_400))).unwrap();
        let add = |p: &str, k: &str| s.enqueue(p.as_bytes(), k).unwrap().id;
        add("pending keyed", "k-p");
        add("pending", "");
        let held = add("held", "");
        s.set_held(&[held], true).unwrap();
        for (p, k) in [("dead keyed", "k-d"), ("dead", ""), ("dead again", "k-d")] {
            let id = add(p, k);
            s.dead_letter(id, "HTTP 400").unwrap();
        }
        for (p, k) in [("delivered keyed", "k-v"), ("delivered", "")] {
            let id = add(p, k);
            s.deliver(&[(id, spool::Evidence::Http(200))]).unwrap();
        }
    }
    let file = dir.path().join("all.export");
    bin()
        .arg("-s")
        .arg(&source)
        .args(["export", "-o"])
        .arg(&file)
        .assert()
        .success();
    let file = file.display().to_string();
    each_backend_and_postgres("importing an export twice", |env| {
        env.run(&["init", "--retain", "1d"]).success();
        let first = json_out(&env.run(&["--json", "import", &file]).success());
        assert_eq!(
            (first["records"].as_u64(), first["imported"].as_u64()),
            (Some(8), Some(8)),
            "{first}"
        );
        assert_eq!(
            (first["pending"].as_u64(), first["held"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(
            (first["dead"].as_u64(), first["delivered"].as_u64()),
            (Some(3), Some(2)),
            "both dead letters of one key come in: {first}"
        );
        let state = || {
            (
                env.size(),
                stdout(&env.run(&["--json", "dlq", "list"]).success()),
                stdout(
                    &env.run(&["--json", "list", "--state", "delivered"])
                        .success(),
                ),
                stdout(&env.run(&["--json", "list"]).success()),
            )
        };
        let before = state();
        assert_eq!(before.0, 3);
        assert_eq!(before.1.lines().count(), 3);
        assert_eq!(before.2.lines().count(), 2);

        let a = env.run(&["--json", "import", &file]).success();
        let again = json_out(&a);
        assert_eq!(
            (again["records"].as_u64(), again["imported"].as_u64()),
            (Some(8), Some(0)),
            "{again}"
        );
        let hits = again["deduplicated"].as_array().unwrap();
        let states: Vec<&str> = hits.iter().map(|h| h["state"].as_str().unwrap()).collect();
        assert_eq!(
            states,
            [
                "pending",
                "pending",
                "held",
                "dead",
                "dead",
                "dead",
                "delivered",
                "delivered"
            ],
            "{again}"
        );
        assert_eq!(state(), before, "the second import changed nothing");
        let err = stderr(&a);
        assert!(
            err.contains("deduplicated: dead letter ") && err.contains("its key k-d;"),
            "{err}"
        );
        assert!(
            err.contains("deduplicated: retained delivered item ") && err.contains("its key k-v;"),
            "{err}"
        );
        let human = stdout(&env.run(&["import", &file]).success());
        assert!(
            human.starts_with(
                "imported 0 of 8 records (0 pending, 0 held, 0 dead, 0 delivered): \
                 0 kept their ids, 0 renumbered, 8 deduplicated"
            ),
            "{human}"
        );
        assert_eq!(state(), before);
    });
}

#[test]
fn import_of_a_malformed_file_changes_nothing() {
    each_backend(|env| {
        let good = "{\"id\":1,\"payload\":\"a\",\"state\":\"pending\"}\n";
        let cases = [
            (format!("{good}{{\"id\":2,\"payload\":\"b\"\n"), "line 2"),
            (
                format!("{good}{good}{{\"id\":3,\"payload\":\"c\",\"colour\":\"red\"}}\n"),
                "line 3: column 30: unknown field `colour`",
            ),
            (
                format!("{good}{{\"id\":2,\"payload\":\"b\",\"state\":\"dead\"}}\n"),
                "line 2: a dead record needs dead_at",
            ),
            (
                format!("{{\"id\":2,\"payload_base64\":\"***\"}}\n{good}"),
                "line 1: payload_base64",
            ),
            ("not json\n".to_string(), "line 1"),
        ];
        // A missing spool is not created by a malformed import.
        let file = env.dir.path().join("in.ndjson");
        std::fs::write(&file, &cases[0].0).unwrap();
        let a = assert_error(env.cmd().arg("import").arg(&file).assert(), 65, &env.path);
        assert!(stderr(&a).contains("in.ndjson line 2"), "{}", stderr(&a));
        assert_eq!(env.files(), ["in.ndjson"]);
        std::fs::remove_file(&file).unwrap();
        // An existing spool is left byte for byte.
        env.enqueue("existing");
        let before = data_snapshot(env);
        for (input, want) in &cases {
            let a = assert_error(env.run_in(&["import", "-"], input.clone()), 65, &env.path);
            let err = stderr(&a);
            assert!(
                err.contains(&format!("stdin {want}")),
                "want {want:?}: {err}"
            );
            assert!(err.contains("nothing was imported"), "{err}");
            assert_eq!(data_snapshot(env), before);
        }
        // 66: the input file does not exist.
        let a = assert_error(env.run(&["import", "no-such-file.ndjson"]), 66, &env.path);
        assert!(stderr(&a).contains("no-such-file.ndjson"), "{}", stderr(&a));
        assert_eq!(data_snapshot(env), before);
        // 64: no input named.
        env.run(&["import"]).code(64).stdout("");
    });
}

#[test]
fn import_creates_the_spool_like_enqueue() {
    each_backend(|env| {
        let a = env
            .run_in(&["import", "-"], "{\"id\":7,\"payload\":\"x\"}\n")
            .success();
        assert!(stdout(&a).contains("1 kept their ids"), "{}", stdout(&a));
        assert!(env.path.exists());
        assert_eq!(env.enqueue("next"), 8);
    });
}
