//! [`Queue`] for the NDJSON backend: each call plans against the index
//! (through [`View`], the planning the memory backend shares), appends
//! its lines, and lets the index take them in.

use super::index::Which;
use super::retain::{write_delivered_done, Records};
use super::{client_lines, format, meta, push_line, Access, FileQueue, Inner, MetaUse};
use crate::backend::identity::{IdentityOutcome, SpoolHeader};
use crate::backend::receive::Receive;
use crate::backend::state::{self, View};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, EnqueueOptions,
    Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats,
    Record,
};
use crate::push::receiver::ReceiveTxn;
use crate::push::wire::Rejected;
use crate::queue::{BackendKind, Queue};
use crate::time::Timestamp;
use std::time::Duration;

/// Pending items per chunk of the shape scan: about 40 ms under the lock.
#[cfg(not(test))]
const SHAPE_CHUNK: usize = 250_000;
/// Small chunks, so that the unit tests walk several.
#[cfg(test)]
const SHAPE_CHUNK: usize = 3;

/// The spool as planning sees it: the index, and the files for whole
/// items.
pub(super) struct FileView<'a> {
    pub q: &'a FileQueue,
    pub inner: &'a Inner,
}

impl View for FileView<'_> {
    fn pending_item(&self, id: ItemId) -> Result<Option<Item>> {
        match self.inner.index()?.pending_loc(id)? {
            Some(loc) => Ok(self.q.items(self.inner, &[loc])?.pop()),
            None => Ok(None),
        }
    }
    fn pending_seq(&self, id: ItemId) -> Result<Option<Option<u64>>> {
        self.inner.index()?.pending_seq(id)
    }
    fn key_owner(&self, key: &str) -> Result<Option<ItemId>> {
        self.inner.index()?.key_owner(key)
    }
    fn coalescible(&self, ck: &str) -> Result<Vec<ItemId>> {
        self.inner.index()?.coalescible(ck)
    }
    fn depth(&self) -> Result<u64> {
        self.inner.index()?.depth()
    }
    fn high_water(&self) -> Result<ItemId> {
        self.inner.index()?.high_water()
    }
    fn max_depth(&self) -> Option<u64> {
        self.inner.meta.max_depth
    }
    fn dead_item(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        match self.inner.index()?.dead_loc(id)? {
            Some(loc) => Ok(self.q.dead_letters(self.inner, &[loc])?.pop()),
            None => Ok(None),
        }
    }
    fn dead_key(&self, id: ItemId) -> Result<Option<String>> {
        self.inner.index()?.dead_key(id)
    }
    fn push(&self) -> Result<PushState> {
        self.inner.index()?.push()
    }
    fn in_flight(&self, after: u64, upto: u64) -> Result<Vec<(u64, ItemId)>> {
        self.inner.index()?.in_flight(after, upto)
    }
    fn client_last_seq(&self, client: &str) -> Result<u64> {
        self.inner.index()?.client_last_seq(client)
    }
    fn client_digest(&self, client: &str, seq: u64) -> Result<Option<String>> {
        self.inner.index()?.client_digest(client, seq)
    }
    fn client_recorded(&self, client: &str, seq: u64) -> Result<bool> {
        self.inner.index()?.client_recorded(client, seq)
    }
    fn client_rejects(&self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        self.inner.index()?.client_rejects(client, after)
    }
}

impl FileQueue {
    fn view<'a>(&'a self, inner: &'a Inner) -> FileView<'a> {
        FileView { q: self, inner }
    }

    /// The uuid given by a regeneration, which rides in push-state lines.
    fn regenerated_uuid(inner: &Inner) -> Result<Option<String>> {
        inner.index()?.uuid()
    }

    /// The push-state line of `push`, with the uuid a regeneration gave.
    fn push_state(inner: &Inner, push: &crate::item::PushState) -> Result<Vec<u8>> {
        Ok(push_line(
            push,
            FileQueue::regenerated_uuid(inner)?.as_ref(),
        ))
    }

    /// Change the meta file as `f` says, written whole at the current
    /// version.
    pub(super) fn update_meta(
        &self,
        inner: &mut Inner,
        f: impl FnOnce(&mut meta::Meta),
    ) -> Result<()> {
        let mut m = inner.meta.clone();
        m.version = meta::META_VERSION;
        f(&mut m);
        meta::write(&*self.io, &self.meta_path, &m)?;
        inner.meta = m;
        Ok(())
    }

    /// Write what delivering items does, in one commit sequence: `done`
    /// lines in the delivered file for up to [`crate::item::PRUNE_BATCH`]
    /// expired records whose move is complete, synced; then the main
    /// file's lines (`main`: the items' `done` lines, which carry the
    /// retained records' deliveries, and whatever goes with them), with
    /// the `done` lines that unfinished moves among the expired records
    /// lack (those records are pruned by a later call, once their move is
    /// complete).
    fn deliver_and_prune(
        &self,
        inner: &mut Inner,
        now: Timestamp,
        mut main: Vec<u8>,
        dead: &[u8],
    ) -> Result<()> {
        let mut delivered = Records::default();
        let expired = FileQueue::expired(inner, now, crate::item::PRUNE_BATCH)?;
        for id in &expired.prunable {
            delivered.push_done(*id);
        }
        for id in &expired.unfinished {
            format::write_done(&mut main, *id);
        }
        let Records { bytes, entries } = delivered;
        let parts = vec![
            (Which::Dead, dead, None),
            (Which::Delivered, &bytes[..], Some(entries)),
        ];
        self.move_out(inner, parts, &main)
    }

    fn update_one(&self, id: ItemId, f: impl FnOnce(&mut Item)) -> Result<bool> {
        self.locked(Access::Small, MetaUse::Skip, |q, inner| {
            let Some(mut item) = q.view(inner).pending_item(id)? else {
                return Ok(false);
            };
            f(&mut item);
            let mut buf = Vec::new();
            format::write_put(&mut buf, &item, None);
            q.append(inner, Which::Main, &buf)?;
            Ok(true)
        })
    }
}

impl Queue for FileQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::File
    }

    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        let mut it = items.iter().cloned().map(Ok);
        Ok(self.enqueue_stream(&mut it, opts)?.iter().collect())
    }

    fn enqueue_stream(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        self.stream_enqueue(items, opts)
    }

    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            let locs = inner.index()?.page(after, limit)?;
            q.items(inner, &locs)
        })
    }

    fn get(&self, id: ItemId) -> Result<Option<Item>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            q.view(inner).pending_item(id)
        })
    }

    fn deliver(&self, done: &[(ItemId, Evidence)]) -> Result<Vec<bool>> {
        let ids: &[ItemId] = &done.iter().map(|d| d.0).collect::<Vec<_>>();
        let now = self.clock.now();
        // The meta file says whether delivered items are retained.
        self.locked(Access::for_items(done.len()), MetaUse::Read, |q, inner| {
            let v = q.view(inner);
            let mut seen = std::collections::HashSet::new();
            // As in the other backends, a repeated id reports true once.
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                found.push(v.pending_seq(*id)?.is_some() && seen.insert(*id));
            }
            let mut buf = Vec::new();
            let retaining = inner.meta.retain().is_some();
            for ((id, evidence), f) in done.iter().zip(&found) {
                if *f {
                    write_delivered_done(&mut buf, *id, retaining, now, *evidence);
                }
            }
            // In-flight items leave skips behind, in the same commit.
            if let Some(push) = state::push_after_removing(&v, ids)? {
                buf.extend(FileQueue::push_state(inner, &push)?);
            }
            q.deliver_and_prune(inner, now, buf, &[])?;
            Ok(found)
        })
    }

    fn retain(&self) -> Result<Option<Duration>> {
        self.locked(Access::Read, MetaUse::Read, |_, inner| {
            Ok(inner.meta.retain())
        })
    }

    fn set_retain(&self, window: Option<Duration>) -> Result<()> {
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            q.update_meta(inner, |m| m.set_retain(window))
        })
    }

    fn shape_cells(
        &self,
        query: &crate::ops::shape::ShapeQuery,
    ) -> Result<Vec<crate::ops::shape::ShapeCell>> {
        use crate::ops::shape::ShapeState;
        // Pending and held items from the index, which has every column
        // shape groups by; dead letters and retained records (few, and
        // not all of their columns are indexed) page by page.
        let held = match query.state {
            ShapeState::Pending => false,
            ShapeState::Held => true,
            ShapeState::Dead | ShapeState::Delivered => {
                return crate::ops::shape::scan_cells(self, query)
            }
        };
        // One scan under the shared lock (about 0.15 s at a million
        // items, which writers wait for); or, when asked to yield, in
        // chunks of ids, each under the lock on its own, with a gap
        // between them, so that a writer waits no longer than one chunk
        // (`spool top` recomputes this every few seconds while enqueues go
        // on). Ids partition the set, so no item counts twice; each chunk
        // is consistent, the whole a picture of a spool that may change
        // meanwhile.
        let chunk = query.yield_to_writers.then_some(SHAPE_CHUNK);
        let mut cells = Vec::new();
        let mut after = 0;
        loop {
            let mut seen = crate::backend::shape_sql::Seen::default();
            cells.extend(self.locked(Access::Read, MetaUse::Skip, |_, inner| {
                inner
                    .index()?
                    .shape_cells(query, held, after, chunk, &mut seen)
            })?);
            if chunk.is_none_or(|n| seen.rows < n) {
                return Ok(cells);
            }
            after = seen.last_id;
            std::thread::sleep(super::CHUNK_GAP);
        }
    }

    fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            let locs = inner.index()?.delivered_page(after, limit)?;
            q.delivered_items(inner, &locs)
        })
    }

    fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            match inner.index()?.delivered_loc(id)? {
                Some(loc) => Ok(q.delivered_items(inner, &[loc])?.pop()),
                None => Ok(None),
            }
        })
    }

    fn prune_delivered(&self, limit: usize) -> Result<u64> {
        let now = self.clock.now();
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            q.prune_locked(inner, now, limit)
        })
    }

    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool> {
        self.update_one(id, |it| it.attempts = attempts)
    }

    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool> {
        self.update_one(id, |it| update.apply(it))
    }

    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>> {
        self.locked(Access::for_items(ids.len()), MetaUse::Skip, |q, inner| {
            let v = q.view(inner);
            if held {
                state::check_hold(&v, ids)?;
            }
            let mut found = Vec::with_capacity(ids.len());
            let mut changed: Vec<Item> = Vec::new();
            for id in ids {
                match v.pending_item(*id)? {
                    Some(mut it) => {
                        found.push(true);
                        if it.held != held && !changed.iter().any(|c| c.id == *id) {
                            it.held = held;
                            changed.push(it);
                        }
                    }
                    None => found.push(false),
                }
            }
            let mut buf = Vec::new();
            for it in &changed {
                format::write_put(&mut buf, it, None);
            }
            q.append(inner, Which::Main, &buf)?;
            Ok(found)
        })
    }

    fn size(&self) -> Result<u64> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.depth()
        })
    }

    fn due_count(&self, now: Timestamp, ignore_backoff: bool, at_most: Option<u64>) -> Result<u64> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            let n = inner.index()?.due_count(now, ignore_backoff)?;
            Ok(at_most.map_or(n, |m| n.min(m)))
        })
    }

    fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.next_retry_after(now)
        })
    }

    fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.group_head(group)
        })
    }

    fn on_full(&self) -> Result<OnFull> {
        self.locked(Access::Read, MetaUse::Read, |q, inner| {
            inner.meta.on_full(&q.meta_path)
        })
    }

    fn set_on_full(&self, policy: OnFull) -> Result<()> {
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            q.update_meta(inner, |m| m.set_on_full(policy))
        })
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        self.locked(Access::Read, MetaUse::Read, |_, inner| {
            Ok(inner.meta.max_depth)
        })
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            q.update_meta(inner, |m| m.max_depth = bound)
        })
    }

    fn uuid(&self) -> Result<String> {
        self.locked(Access::Read, MetaUse::Read, |q, inner| {
            FileQueue::regenerated_uuid(inner)?
                .or_else(|| inner.meta.uuid.clone())
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "{} has no uuid yet; the first write to the spool assigns one",
                        q.path.display()
                    ))
                })
        })
    }

    fn high_water(&self) -> Result<ItemId> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.high_water()
        })
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        let now = self.clock.now();
        self.locked(Access::Small, MetaUse::Skip, |q, inner| {
            let v = q.view(inner);
            let Some(dl) = state::prepare_kill(&v, id, last_error, now)? else {
                return Ok(false);
            };
            let mut main = Vec::new();
            format::write_done(&mut main, id);
            if let Some(push) = state::push_after_removing(&v, &[id])? {
                main.extend(FileQueue::push_state(inner, &push)?);
            }
            let mut dead = Vec::new();
            format::write_dead(&mut dead, &dl);
            q.move_out(inner, vec![(Which::Dead, &dead[..], None)], &main)?;
            Ok(true)
        })
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            let locs = inner.index()?.dead_page(after, limit)?;
            q.dead_letters(inner, &locs)
        })
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            q.view(inner).dead_item(id)
        })
    }

    fn dead_count(&self) -> Result<u64> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.dead_count()
        })
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.locked(Access::for_items(ids.len()), MetaUse::Read, |q, inner| {
            let v = q.view(inner);
            state::check_requeue(&v, ids)?;
            let mut seen = std::collections::HashSet::new();
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                found.push(v.dead_key(*id)?.is_some() && seen.insert(*id));
            }
            let mut items: Vec<Item> = Vec::new();
            for id in ids {
                if items.iter().any(|i| i.id == *id) {
                    continue;
                }
                if let Some(it) = state::prepare_requeue(&v, *id)? {
                    items.push(it);
                }
            }
            let mut main = Vec::new();
            let mut dead = Vec::new();
            for it in &items {
                format::write_put(&mut main, it, None);
                format::write_done(&mut dead, it.id);
            }
            q.move_out(inner, vec![(Which::Dead, &dead[..], None)], &main)?;
            Ok(found)
        })
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.locked(Access::for_items(ids.len()), MetaUse::Skip, |q, inner| {
            let v = q.view(inner);
            let mut gone = std::collections::BTreeSet::new();
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                found.push(v.dead_key(*id)?.is_some() && gone.insert(*id));
            }
            if gone.is_empty() {
                return Ok(found);
            }
            let mut buf = Vec::new();
            for id in &gone {
                format::write_done(&mut buf, *id);
            }
            // The main file first: a move cut between its two appends (a
            // requeue, or a dead-lettering, that a crash interrupted) can
            // have left a live `put` line of a dead letter there, which
            // the dead-letter file overrides only while it holds the
            // record. Its `done` line ends it before the record goes; a
            // crash between the two appends leaves a dead letter.
            q.append(inner, Which::Main, &buf)?;
            q.append(inner, Which::Dead, &buf)?;
            Ok(found)
        })
    }

    fn import_stream(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()> {
        self.stream_import(records, each)
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        self.locked(Access::Read, MetaUse::Read, |q, inner| {
            let mut s = inner.index()?.stats(now)?;
            s.max_depth = inner.meta.max_depth;
            s.on_full = inner.meta.on_full(&q.meta_path)?;
            s.retain = inner.meta.retain();
            Ok(s)
        })
    }

    fn push_state(&self) -> Result<PushState> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.push()
        })
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        self.locked(Access::Read, MetaUse::Skip, |q, inner| {
            let locs = inner.index()?.in_flight_page(after_seq, limit)?;
            q.items(inner, &locs)
        })
    }

    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        self.locked(Access::for_items(ids.len()), MetaUse::Skip, |q, inner| {
            let (items, push) = state::plan_assign(&q.view(inner), ids)?;
            if items.is_empty() {
                return Ok(Vec::new());
            }
            let mut buf = Vec::new();
            for it in &items {
                format::write_put(&mut buf, it, None);
            }
            buf.extend(FileQueue::push_state(inner, &push)?);
            q.append(inner, Which::Main, &buf)?;
            Ok(items
                .iter()
                .map(|i| (i.id, i.push_seq.unwrap_or_default()))
                .collect())
        })
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        let now = self.clock.now();
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            let v = q.view(inner);
            let before = v.push()?;
            let plan = state::plan_ack(&v, last_seq, rejected)?;
            if plan.push == before {
                return Ok(PushAck {
                    acked: plan.push.acked,
                    ..PushAck::default()
                });
            }
            // Dead letters first, as for every move between the files.
            let mut dead = Vec::new();
            for (id, reason) in &plan.rejected {
                if let Some(dl) = state::prepare_kill(&v, *id, reason, now)? {
                    format::write_dead(&mut dead, &dl);
                }
            }
            let mut main = Vec::new();
            let retaining = inner.meta.retain().is_some();
            for id in &plan.delivered {
                let evidence = Evidence::Push(plan.push.acked);
                write_delivered_done(&mut main, *id, retaining, now, evidence);
            }
            for (id, _) in &plan.rejected {
                format::write_done(&mut main, *id);
            }
            main.extend(FileQueue::push_state(inner, &plan.push)?);
            q.deliver_and_prune(inner, now, main, &dead)?;
            Ok(PushAck {
                acked: plan.push.acked,
                delivered: plan.delivered,
                rejected: plan.rejected.into_iter().map(|(id, _)| id).collect(),
            })
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.locked(Access::Mutate, MetaUse::Skip, |q, inner| {
            let (items, push) = state::plan_renumber(&q.view(inner))?;
            let uuid = uuid::Uuid::new_v4().to_string();
            let mut buf = Vec::new();
            for it in &items {
                format::write_put(&mut buf, it, None);
            }
            buf.extend(push_line(&push, Some(&uuid)));
            q.append(inner, Which::Main, &buf)?;
            Ok(uuid)
        })
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let now = self.clock.now();
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            let v = q.view(inner);
            let mut rx = Receive::new(&v, now)?;
            f(&mut rx)?;
            let changes = rx.finish();
            let mut buf = Vec::new();
            for id in &changes.replaced {
                format::write_done(&mut buf, *id);
            }
            for it in &changes.items {
                format::write_put(&mut buf, it, None);
            }
            for (id, delta) in &changes.clients {
                client_lines(&mut buf, id, delta);
            }
            q.append(inner, Which::Main, &buf)?;
            Ok(())
        })
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.client_summaries()
        })
    }

    fn push_client_count(&self) -> Result<u64> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            inner.index()?.client_count()
        })
    }

    fn import_with_identity(
        &self,
        header: &SpoolHeader,
        adopt: bool,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<IdentityOutcome> {
        self.stream_import_with(records, each, Some((header, adopt)))?
            .ok_or_else(|| Error::Internal("an identity import decided nothing".into()))
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::shape::{shape, ShapeBy, ShapeOptions, ShapeState};
    use crate::{OpenMode, OpenOptions, Spool, Timestamp};

    #[test]
    fn the_shape_walks_the_pending_items_in_chunks_and_counts_each_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(
            &dir.path().join("q.ndjson"),
            &OpenOptions::new(OpenMode::Create),
        )
        .unwrap();
        let mut ids = Vec::new();
        for i in 0..10 {
            ids.push(s.enqueue(format!("p{i}").as_bytes(), "").unwrap().id);
        }
        // Holes in the ids, and held items outside the pending set.
        s.dead_letter(ids[4], "gone").unwrap();
        s.set_held(&[ids[7], ids[8]], true).unwrap();
        let count = |state| {
            let opts = ShapeOptions {
                by: ShapeBy::Attempts,
                state,
                yield_to_writers: true,
                ..ShapeOptions::default()
            };
            let sh = shape(&*s, &opts, Timestamp::now()).unwrap();
            sh.rows.iter().find(|r| r.value == "TOTAL").unwrap().total
        };
        assert_eq!(count(ShapeState::Pending), 7, "10 - 1 dead - 2 held");
        assert_eq!(count(ShapeState::Held), 2);
        assert_eq!(super::SHAPE_CHUNK, 3, "several chunks were walked");
    }
}
