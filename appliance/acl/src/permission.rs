//! Permissions as upstream's plain ACL writes and checks them: the bits, the text an
//! operator writes in `topicPerms`/`groupPerms` (`topicA=PUB|SUB`), and which request
//! codes need an admin account.

use ringmq_remoting::codes::RequestCode;

/// Permission bits, upstream's values (`Permission.java`): they never leave the process,
/// but keeping them lets log lines and tests speak upstream's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm(u8);

impl Perm {
    pub const DENY: Perm = Perm(1);
    /// Needed by requests any granted permission satisfies.
    pub const ANY: Perm = Perm(1 << 1);
    pub const PUB: Perm = Perm(1 << 2);
    pub const SUB: Perm = Perm(1 << 3);
    pub const PUB_SUB: Perm = Perm(Self::PUB.0 | Self::SUB.0);

    pub fn bits(self) -> u8 {
        self.0
    }

    /// Parses `PUB`, `SUB`, `PUB|SUB`, `SUB|PUB` or `DENY`; anything else is DENY, as
    /// upstream reads it (the file check in [`parse_strict`] refuses such text first).
    pub fn parse_lenient(text: &str) -> Perm {
        Self::parse_strict(text).unwrap_or(Perm::DENY)
    }

    /// `None` for text that is not one of the five permission words.
    pub fn parse_strict(text: &str) -> Option<Perm> {
        match text.trim() {
            "PUB" => Some(Perm::PUB),
            "SUB" => Some(Perm::SUB),
            "PUB|SUB" | "SUB|PUB" => Some(Perm::PUB_SUB),
            "DENY" => Some(Perm::DENY),
            _ => None,
        }
    }

    /// Whether `owned` grants `self` (upstream's `checkPermission`): DENY refuses
    /// everything, ANY is met by PUB or SUB, otherwise a shared bit is needed.
    pub fn granted_by(self, owned: Perm) -> bool {
        if owned.0 & Perm::DENY.0 != 0 {
            return false;
        }
        if self.0 & Perm::ANY.0 != 0 {
            return owned.0 & (Perm::PUB.0 | Perm::SUB.0) != 0;
        }
        self.0 & owned.0 != 0
    }

    /// The word an operator writes for this permission.
    pub fn as_text(self) -> &'static str {
        match self {
            Perm::PUB => "PUB",
            Perm::SUB => "SUB",
            Perm::PUB_SUB => "PUB|SUB",
            Perm::ANY => "ANY",
            _ => "DENY",
        }
    }
}

/// Splits a `topicPerms`/`groupPerms` entry `name=PERM` as upstream's `StringUtils.split`
/// does (runs of `=` count as one); `None` unless exactly two parts remain.
pub fn split_resource_perm(entry: &str) -> Option<(&str, &str)> {
    let mut parts = entry.split('=').filter(|p| !p.is_empty());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), Some(word), None) => Some((name.trim(), word)),
        _ => None,
    }
}

/// One entry of an admin update, split and checked as upstream's `checkResourcePerms`
/// does: a bad format or an unknown permission word is refused.
pub fn parse_resource_perm(entry: &str) -> Result<(&str, Perm), String> {
    let Some((name, word)) = split_resource_perm(entry) else {
        return Err(format!(
            "Parse Resource format error for {entry}.\nThe expected resource format is \
             'Res=Perm'. For example: topicA=SUB"
        ));
    };
    match Perm::parse_strict(word) {
        Some(p) => Ok((name, p)),
        None => Err(format!(
            "Parse resource permission error for {entry}.\nThe expected permissions are 'SUB' \
             or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
        )),
    }
}

/// Request codes only an admin account may send. Upstream's set (`Permission.ADMIN_CODE`)
/// is topic and group creation and deletion and UPDATE_BROKER_CONFIG. ringmq adds the list
/// forms of topic and group creation (18, 225), which upstream's set predates, and the ACL
/// writes (50, 51, 53) and the ACL listing with its secrets (54), which upstream leaves to
/// any signed account: an account must not be able to grant itself more than it was given
/// or read the others' secrets.
pub fn needs_admin(code: i32) -> bool {
    use RequestCode as C;
    matches!(
        RequestCode::from_code(code),
        Some(
            C::UpdateAndCreateTopic
                | C::UpdateAndCreateTopicList
                | C::UpdateBrokerConfig
                | C::DeleteTopicInBroker
                | C::UpdateAndCreateSubscriptiongroup
                | C::UpdateAndCreateSubscriptiongroupList
                | C::DeleteSubscriptiongroup
                | C::UpdateAndCreateAclConfig
                | C::DeleteAclConfig
                | C::UpdateGlobalWhiteAddrsConfig
                | C::GetBrokerClusterAclConfig
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_any_needs_pub_or_sub_and_bits_must_meet() {
        assert!(!Perm::PUB.granted_by(Perm::DENY));
        assert!(!Perm::ANY.granted_by(Perm::DENY));
        assert!(Perm::ANY.granted_by(Perm::SUB));
        assert!(Perm::ANY.granted_by(Perm::PUB));
        assert!(Perm::PUB.granted_by(Perm::PUB_SUB));
        assert!(!Perm::PUB.granted_by(Perm::SUB));
        assert!(!Perm::SUB.granted_by(Perm::PUB));
        assert_eq!(
            [Perm::DENY, Perm::ANY, Perm::PUB, Perm::SUB].map(Perm::bits),
            [1, 2, 4, 8]
        );
    }

    #[test]
    fn permission_words_parse_as_upstream() {
        assert_eq!(Perm::parse_lenient(" SUB|PUB "), Perm::PUB_SUB);
        assert_eq!(Perm::parse_lenient("pub"), Perm::DENY);
        assert_eq!(
            parse_resource_perm("topicA=PUB|SUB"),
            Ok(("topicA", Perm::PUB_SUB))
        );
        assert!(parse_resource_perm("topicA")
            .unwrap_err()
            .contains("'Res=Perm'"));
        assert!(parse_resource_perm("topicA=ALL")
            .unwrap_err()
            .contains("'SUB' or 'PUB'"));
        assert!(parse_resource_perm("a=b=c").is_err());
    }

    #[test]
    fn admin_codes_are_upstreams_and_the_acl_writes() {
        for code in [17, 18, 25, 215, 200, 225, 207, 50, 51, 53, 54] {
            assert!(needs_admin(code), "{code}");
        }
        for code in [10, 11, 310, 34, 52, 26] {
            assert!(!needs_admin(code), "{code}");
        }
    }
}
