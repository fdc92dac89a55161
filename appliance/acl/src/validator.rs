//! The compiled ACL and the check every request passes (upstream's
//! `PlainPermissionManager.validate`), in upstream's order:
//!
//! 1. a peer matching a global white address passes;
//! 2. a request without `AccessKey` is refused, as is an unknown key;
//! 3. a peer matching the account's own white address passes;
//! 4. the signature must be right;
//! 5. a send to the trace topic passes;
//! 6. admin codes need an admin account, and every resource the request touches needs
//!    its permission, from the account's `topicPerms`/`groupPerms` or else its default.

use std::collections::HashMap;
use std::net::IpAddr;

use ringmq_remoting::RemotingCommand;

use crate::address::AddressPattern;
use crate::config::{PlainAccessConfig, PlainAclFile, KEY_MIN_LENGTH};
use crate::permission::{needs_admin, split_resource_perm, Perm};
use crate::resource::{describe, group_resource, is_group, required};
use crate::signature::{verify, ACCESS_KEY, SIGNATURE};

/// Message traces are written by every client that turns tracing on; upstream lets a PUB
/// to this topic through whatever the account's permissions say.
const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

/// One account, ready to check requests against.
#[derive(Debug, Clone)]
pub struct Account {
    pub access_key: String,
    secret_key: String,
    white_address: AddressPattern,
    pub admin: bool,
    default_topic_perm: Perm,
    default_group_perm: Perm,
    /// Topic names and group retry topics.
    resource_perms: HashMap<String, Perm>,
}

impl Account {
    /// Compiles one `accounts` entry, refusing what upstream refuses.
    pub fn compile(config: &PlainAccessConfig) -> Result<Account, String> {
        check_keys(config)?;
        let mut resource_perms = HashMap::new();
        for (entries, group) in [(&config.topic_perms, false), (&config.group_perms, true)] {
            for entry in entries {
                let (name, perm) = file_resource_perm(entry, group)?;
                let resource = if group {
                    group_resource(name)
                } else {
                    name.to_string()
                };
                resource_perms.insert(resource, perm);
            }
        }
        let perm = |p: &Option<String>| p.as_deref().map_or(Perm::DENY, Perm::parse_lenient);
        Ok(Account {
            access_key: config.access_key.clone(),
            secret_key: config.secret_key.clone(),
            white_address: AddressPattern::parse(&config.white_remote_address)?,
            admin: config.admin,
            default_topic_perm: perm(&config.default_topic_perm),
            default_group_perm: perm(&config.default_group_perm),
            resource_perms,
        })
    }

    /// Step 6 (upstream 5.x's checker): an admin account may do anything; otherwise admin
    /// codes are refused and each resource needs its permission.
    fn check_perms(&self, code: i32, needs: &[(String, Perm)]) -> Result<(), String> {
        if self.admin {
            return Ok(());
        }
        if needs_admin(code) {
            return Err(format!(
                "Need admin permission for request code={code}, but accessKey={} is not",
                self.access_key
            ));
        }
        for (resource, needed) in needs {
            let group = is_group(resource);
            match self.resource_perms.get(resource) {
                Some(owned) if needed.granted_by(*owned) => {}
                Some(_) => return Err(format!("No permission for {}", describe(resource))),
                None => {
                    let owned = if group {
                        self.default_group_perm
                    } else {
                        self.default_topic_perm
                    };
                    if !needed.granted_by(owned) {
                        return Err(format!("No default permission for {}", describe(resource)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A `topicPerms`/`groupPerms` entry as a file holds it. As upstream loads files, an
/// entry without `=` is an error and an unknown permission word reads as DENY (with a
/// warning here, so the operator learns why a topic is refused).
fn file_resource_perm(entry: &str, group: bool) -> Result<(&str, Perm), String> {
    let Some((name, word)) = split_resource_perm(entry) else {
        let kind = if group { "group" } else { "topic" };
        return Err(format!(
            "Parse resource permission failed for {kind}:{entry}"
        ));
    };
    let perm = Perm::parse_strict(word).unwrap_or_else(|| {
        tracing::warn!(
            entry,
            "unknown permission word in an ACL file; it reads as DENY"
        );
        Perm::DENY
    });
    Ok((name, perm))
}

/// Upstream's key rule: both keys present and longer than six characters.
pub fn check_keys(config: &PlainAccessConfig) -> Result<(), String> {
    if config.access_key.len() <= KEY_MIN_LENGTH || config.secret_key.len() <= KEY_MIN_LENGTH {
        return Err(format!(
            "The accessKey={} and secretKey=**** cannot be null and length should longer than 6",
            config.access_key
        ));
    }
    Ok(())
}

/// Why a request was refused; the text is upstream's and goes into the answer's remark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub String);

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every account and white address of every ACL file, compiled.
#[derive(Debug, Clone, Default)]
pub struct AclRules {
    global_white: Vec<AddressPattern>,
    accounts: HashMap<String, Account>,
}

impl AclRules {
    /// Compiles files in order; an access key already defined by an earlier file is
    /// skipped with a warning, as upstream does. Any bad entry fails the whole set, so a
    /// half-written file never replaces rules that worked.
    pub fn compile<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a PlainAclFile)>,
    ) -> Result<AclRules, String> {
        let mut rules = AclRules::default();
        for (name, file) in files {
            for pattern in &file.global_white_remote_addresses {
                let compiled =
                    AddressPattern::parse(pattern).map_err(|e| format!("{name}: {e}"))?;
                rules.global_white.push(compiled);
            }
            for config in &file.accounts {
                let account = Account::compile(config).map_err(|e| format!("{name}: {e}"))?;
                if rules.accounts.contains_key(&account.access_key) {
                    tracing::warn!(
                        file = name,
                        access_key = %account.access_key,
                        "the accessKey is repeated in multiple ACL files; the first one counts"
                    );
                    continue;
                }
                rules.accounts.insert(account.access_key.clone(), account);
            }
        }
        Ok(rules)
    }

    pub fn account_count(&self) -> usize {
        self.accounts.len()
    }

    /// Checks one request from `peer`.
    pub fn check(&self, request: &RemotingCommand, peer: IpAddr) -> Result<(), Denied> {
        if self.global_white.iter().any(|p| p.matches(peer)) {
            return Ok(());
        }
        let Some(access_key) = request.ext_fields.get(ACCESS_KEY) else {
            return Err(Denied("No accessKey is configured".into()));
        };
        let Some(account) = self.accounts.get(access_key) else {
            return Err(Denied(format!("No acl config for {access_key}")));
        };
        if account.white_address.matches(peer) {
            return Ok(());
        }
        let given = request.ext_fields.get(SIGNATURE).unwrap_or_default();
        if !verify(&account.secret_key, request, given) {
            return Err(Denied(format!(
                "Check signature failed for accessKey={access_key}"
            )));
        }
        let needs = required(request).map_err(Denied)?;
        if needs
            .iter()
            .any(|(r, p)| r == TRACE_TOPIC && *p == Perm::PUB)
        {
            return Ok(());
        }
        account.check_perms(request.code, &needs).map_err(Denied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{sign, Credentials};

    const FILE: &str = "\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 87654321
    whiteRemoteAddress: 192.168.1.*
    admin: true
";

    fn rules() -> AclRules {
        let file = PlainAclFile::parse(FILE).unwrap();
        AclRules::compile([("plain_acl.yml", &file)]).unwrap()
    }

    fn creds(ak: &str, sk: &str) -> Credentials {
        Credentials::new(ak, sk)
    }

    fn signed(code: i32, fields: &[(&str, &str)], c: &Credentials) -> RemotingCommand {
        let mut r = RemotingCommand::request(code, 1);
        for (k, v) in fields {
            r.ext_fields.insert(*k, *v);
        }
        sign(&mut r, c);
        r
    }

    fn lo() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[test]
    fn each_step_refuses_with_upstreams_words() {
        let rules = rules();
        let user = creds("RocketMQ", "12345678");
        let unsigned = RemotingCommand::request(310, 1);
        assert_eq!(
            rules.check(&unsigned, lo()).unwrap_err().0,
            "No accessKey is configured"
        );
        let stranger = signed(310, &[("b", "topicB")], &creds("nobody1", "12345678"));
        assert_eq!(
            rules.check(&stranger, lo()).unwrap_err().0,
            "No acl config for nobody1"
        );
        let forged = signed(310, &[("b", "topicB")], &creds("RocketMQ", "wrong-secret"));
        assert_eq!(
            rules.check(&forged, lo()).unwrap_err().0,
            "Check signature failed for accessKey=RocketMQ"
        );
        let denied = signed(310, &[("b", "topicA")], &user);
        assert_eq!(
            rules.check(&denied, lo()).unwrap_err().0,
            "No permission for topic:topicA"
        );
        let unlisted = signed(310, &[("b", "other")], &user);
        assert_eq!(
            rules.check(&unlisted, lo()).unwrap_err().0,
            "No default permission for topic:other"
        );
        let sub_only = signed(310, &[("b", "topicC")], &user);
        assert_eq!(
            rules.check(&sub_only, lo()).unwrap_err().0,
            "No permission for topic:topicC"
        );
        let admin_code = signed(17, &[("topic", "T")], &user);
        assert_eq!(
            rules.check(&admin_code, lo()).unwrap_err().0,
            "Need admin permission for request code=17, but accessKey=RocketMQ is not"
        );
    }

    #[test]
    fn allowed_requests_pass() {
        let rules = rules();
        let user = creds("RocketMQ", "12345678");
        assert_eq!(
            rules.check(&signed(310, &[("b", "topicB")], &user), lo()),
            Ok(())
        );
        let pull = [("topic", "topicC"), ("consumerGroup", "anyGroup")];
        assert_eq!(rules.check(&signed(11, &pull, &user), lo()), Ok(()));
        let pull_a = [("topic", "topicC"), ("consumerGroup", "groupA")];
        assert!(rules.check(&signed(11, &pull_a, &user), lo()).is_err());
        let trace = [("b", "RMQ_SYS_TRACE_TOPIC")];
        assert_eq!(rules.check(&signed(310, &trace, &user), lo()), Ok(()));
        let admin = creds("rocketmq2", "87654321");
        assert_eq!(
            rules.check(&signed(17, &[("topic", "T")], &admin), lo()),
            Ok(())
        );
        assert_eq!(
            rules.check(&signed(310, &[("b", "anything")], &admin), lo()),
            Ok(())
        );
    }

    #[test]
    fn white_addresses_skip_the_signature() {
        let rules = rules();
        let unsigned = RemotingCommand::request(17, 1);
        assert_eq!(
            rules.check(&unsigned, "10.10.103.9".parse().unwrap()),
            Ok(())
        );
        let mut keyed = RemotingCommand::request(17, 1);
        keyed.ext_fields.insert("AccessKey", "rocketmq2");
        assert_eq!(rules.check(&keyed, "192.168.1.20".parse().unwrap()), Ok(()));
        assert!(rules.check(&keyed, lo()).is_err());
    }

    #[test]
    fn bad_entries_fail_the_whole_set() {
        for bad in [
            "accounts:\n  - accessKey: short\n    secretKey: 12345678\n",
            "accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n    topicPerms: [a]\n",
            "globalWhiteRemoteAddresses: [300.1.1.1]\n",
            "accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n    whiteRemoteAddress: 1.2.{3}\n",
        ] {
            let file = PlainAclFile::parse(bad).unwrap();
            assert!(AclRules::compile([("f.yml", &file)]).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unknown_permission_word_in_a_file_reads_as_deny() {
        let text = "accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n    defaultTopicPerm: PUB\n    topicPerms: [T=ALL]\n";
        let file = PlainAclFile::parse(text).unwrap();
        let rules = AclRules::compile([("f.yml", &file)]).unwrap();
        let c = creds("longenough", "12345678");
        assert!(rules.check(&signed(310, &[("b", "T")], &c), lo()).is_err());
        assert_eq!(rules.check(&signed(310, &[("b", "U")], &c), lo()), Ok(()));
    }

    #[test]
    fn a_key_in_two_files_keeps_the_first() {
        let a = PlainAclFile::parse("accounts:\n  - {accessKey: dupkey1, secretKey: secret-a}\n")
            .unwrap();
        let b = PlainAclFile::parse("accounts:\n  - {accessKey: dupkey1, secretKey: secret-b}\n")
            .unwrap();
        let rules = AclRules::compile([("a.yml", &a), ("b.yml", &b)]).unwrap();
        assert_eq!(rules.account_count(), 1);
        let r = signed(26, &[], &creds("dupkey1", "secret-a"));
        assert_eq!(rules.check(&r, lo()), Ok(()));
    }
}
