//! What a pop selects (features.md §f.4): a TAG expression (the ConsumeQueue's tagsCode
//! first, then the record's own tag, since no client re-checks what a pop hands out), or
//! a SQL92 predicate over the message properties (compiled whatever
//! `enablePropertyFilter` says, as upstream's POP does). Messages of
//! POP retry topics pass a SQL92 pop unchecked, as upstream's `filterSupportRetry=false`.

use std::sync::Arc;

use ringmq_remoting::message::tags::TagFilter;
use ringmq_remoting::pop::RetryKind;
use ringmq_store::MessageFilter;

use crate::filter::tag::TagMessageFilter;
use crate::filter::PropertyPredicate;
use crate::long_polling::ArrivalMatcher;
use crate::processor::pull::PullFilter;

enum Selector {
    Tag(TagMessageFilter),
    Sql(PullFilter),
}

/// A pop's filter, for the store reads and for waking a waiting pop.
pub struct PopFilter {
    selector: Selector,
    all: TagMessageFilter,
}

impl std::fmt::Debug for PopFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.selector {
            Selector::Tag(_) => "PopFilter::Tag",
            Selector::Sql(_) => "PopFilter::Sql",
        })
    }
}

impl PopFilter {
    pub fn tag(filter: TagFilter) -> Self {
        Self {
            selector: Selector::Tag(TagMessageFilter::exact(filter)),
            all: TagMessageFilter::exact(TagFilter::All),
        }
    }

    pub fn sql(predicate: Arc<dyn PropertyPredicate>) -> Self {
        Self {
            selector: Selector::Sql(PullFilter::Sql(predicate)),
            all: TagMessageFilter::exact(TagFilter::All),
        }
    }

    /// Selects every message.
    pub fn all() -> Self {
        Self::tag(TagFilter::All)
    }

    fn unfiltered(&self, topic: &str) -> bool {
        matches!(self.selector, Selector::Sql(_)) && RetryKind::of_topic(topic) != RetryKind::Normal
    }

    /// The store filter for reading `topic`.
    pub fn for_topic(&self, topic: &str) -> &dyn MessageFilter {
        match &self.selector {
            _ if self.unfiltered(topic) => &self.all,
            Selector::Tag(t) => t,
            Selector::Sql(s) => s,
        }
    }

    /// Whether arrivals on `topic` are checked against the properties, and the check.
    pub fn arrival_matcher(self: &Arc<Self>, topic: &str) -> (bool, ArrivalMatcher) {
        if self.unfiltered(topic) {
            return (false, Box::new(|_, _| true));
        }
        let me = self.clone();
        match &self.selector {
            Selector::Tag(_) => (
                false,
                Box::new(move |code, _| match &me.selector {
                    Selector::Tag(t) => t.tag_filter().matches_tags_code(code),
                    Selector::Sql(_) => true,
                }),
            ),
            Selector::Sql(_) => (
                true,
                Box::new(move |code, props| match &me.selector {
                    Selector::Sql(s) => s.matches_arrival(code, props),
                    Selector::Tag(_) => true,
                }),
            ),
        }
    }
}
