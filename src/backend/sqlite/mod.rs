//! Placeholder replaced by the real backend.
use crate::backend::OpenOptions;
use crate::error::{Error, Result};
use crate::item::*;
use crate::queue::{BackendKind, Queue};
use crate::time::Timestamp;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct SqliteQueue {
    path: PathBuf,
}

impl SqliteQueue {
    pub fn open(path: &Path, _opts: &OpenOptions) -> Result<SqliteQueue> {
        Err(Error::Unsupported(format!(
            "{} backend not built",
            path.display()
        )))
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn files(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }
}

impl Queue for SqliteQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }
    fn enqueue_batch(&self, _: &[NewItem], _: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        Err(Error::Internal("x".into()))
    }
    fn page(&self, _: ItemId, _: usize) -> Result<Vec<Item>> {
        Err(Error::Internal("x".into()))
    }
    fn get(&self, _: ItemId) -> Result<Option<Item>> {
        Err(Error::Internal("x".into()))
    }
    fn mark_done(&self, _: &[ItemId]) -> Result<Vec<bool>> {
        Err(Error::Internal("x".into()))
    }
    fn set_attempts(&self, _: ItemId, _: u32) -> Result<bool> {
        Err(Error::Internal("x".into()))
    }
    fn record_attempt(&self, _: ItemId, _: &AttemptUpdate) -> Result<bool> {
        Err(Error::Internal("x".into()))
    }
    fn set_held(&self, _: &[ItemId], _: bool) -> Result<Vec<bool>> {
        Err(Error::Internal("x".into()))
    }
    fn size(&self) -> Result<u64> {
        Err(Error::Internal("x".into()))
    }
    fn max_depth(&self) -> Result<Option<u64>> {
        Err(Error::Internal("x".into()))
    }
    fn set_max_depth(&self, _: Option<u64>) -> Result<()> {
        Err(Error::Internal("x".into()))
    }
    fn uuid(&self) -> Result<String> {
        Err(Error::Internal("x".into()))
    }
    fn high_water(&self) -> Result<ItemId> {
        Err(Error::Internal("x".into()))
    }
    fn dead_letter(&self, _: ItemId, _: &str) -> Result<bool> {
        Err(Error::Internal("x".into()))
    }
    fn dead_page(&self, _: ItemId, _: usize) -> Result<Vec<DeadLetter>> {
        Err(Error::Internal("x".into()))
    }
    fn dead_get(&self, _: ItemId) -> Result<Option<DeadLetter>> {
        Err(Error::Internal("x".into()))
    }
    fn dead_count(&self) -> Result<u64> {
        Err(Error::Internal("x".into()))
    }
    fn requeue(&self, _: &[ItemId]) -> Result<Vec<bool>> {
        Err(Error::Internal("x".into()))
    }
    fn purge(&self, _: &[ItemId]) -> Result<Vec<bool>> {
        Err(Error::Internal("x".into()))
    }
    fn import(&self, _: &[Record]) -> Result<Vec<Imported>> {
        Err(Error::Internal("x".into()))
    }
    fn stats(&self, _: Timestamp) -> Result<QueueStats> {
        Err(Error::Internal("x".into()))
    }
}
