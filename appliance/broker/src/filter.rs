//! Message filters for pull: tags and SQL92 (features.md §i), and the predicate interface the
//! pull and heartbeat paths hold a compiled SQL92 expression through.

use std::sync::Arc;

pub mod sql92;
pub mod tag;

/// A predicate over a message's property string (`name 0x01 value 0x02 …`), e.g. a compiled
/// SQL92 expression.
pub trait PropertyPredicate: Send + Sync {
    fn matches(&self, properties: &str) -> bool;
}

impl std::fmt::Debug for dyn PropertyPredicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PropertyPredicate")
    }
}

/// Compiles a SQL92 subscription expression; [`sql92::compile_predicate`] is the one the broker
/// installs.
pub type Sql92Compiler = fn(&str) -> Result<Arc<dyn PropertyPredicate>, String>;
