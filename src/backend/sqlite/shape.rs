//! `spool shape`'s counts in one scan of the set's table (see
//! [`crate::backend::shape_sql`]).

use super::db::Db;
use super::rows::UNKNOWN_ENQUEUED_AT;
use crate::backend::shape_sql::count_cells;
use crate::error::Result;
use crate::ops::shape::{ShapeBy, ShapeCell, ShapeQuery, ShapeState};

impl Db<'_> {
    /// The cells of `q` from one scan of the set's table.
    pub fn shape_cells(&self, q: &ShapeQuery) -> Result<Vec<ShapeCell>> {
        let value = match q.by {
            ShapeBy::Error => "last_error",
            ShapeBy::Group => "group_name",
            ShapeBy::Attempts => "NULL",
            ShapeBy::KeyPrefix => "idempotency_key",
        };
        let (table, filter) = match q.state {
            ShapeState::Pending => ("morph_offline_queue", "WHERE held = 0"),
            ShapeState::Held => ("morph_offline_queue", "WHERE held <> 0"),
            ShapeState::Dead => ("spool_dead_letters", ""),
            ShapeState::Delivered => ("spool_delivered", ""),
        };
        let sql = format!("SELECT {value}, attempts, enqueued_at FROM {table} {filter}");
        self.conn
            .prepare(&sql)
            .and_then(|mut stmt| count_cells(&mut stmt, q, Some(UNKNOWN_ENQUEUED_AT), None))
            .map_err(|e| self.err(e))
    }
}
