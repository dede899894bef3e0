//! ACL policies and tokens in the state store: tokens name existing policies, a secret
//! resolves to its one token, deletion by name or accessor, the bootstrap happens once (again
//! only with the reset index), and everything survives a snapshot image.

use teamster_storage::fsm::{
    AclBootstrap, AclPolicyDelete, AclPolicyUpsert, AclTokenDelete, AclTokenUpsert, ApplyError,
    Command,
};
use teamster_storage::model::{AclPolicy, AclToken};
use teamster_storage::state::{StateStore, Table};

fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
}

fn policy(name: &str, rules: &str) -> Command {
    Command::AclPolicyUpsert(AclPolicyUpsert {
        policies: vec![AclPolicy {
            name: name.into(),
            rules: rules.into(),
            ..AclPolicy::default()
        }],
    })
}

fn token(n: u8, kind: &str, policies: &[&str]) -> AclToken {
    AclToken {
        accessor_id: uuid(n),
        secret_id: uuid(100 + n),
        name: format!("token {n}"),
        r#type: kind.into(),
        policies: policies.iter().map(|p| p.to_string()).collect(),
        ..AclToken::default()
    }
}

fn upsert_token(t: AclToken) -> Command {
    Command::AclTokenUpsert(AclTokenUpsert { tokens: vec![t] })
}

#[test]
fn tokens_name_policies_and_resolve_by_secret() {
    let store = StateStore::new();
    // As Nomad's: a token may name a policy that is not written yet.
    let r = store.apply(1, upsert_token(token(9, "client", &["not-yet"])));
    assert!(r.rejection().is_none(), "{r:?}");
    assert!(store.snapshot().acl_token_by_accessor(&uuid(9)).is_some());

    assert!(store
        .apply(
            2,
            policy("readonly", r#"namespace "default" { policy = "read" }"#)
        )
        .rejection()
        .is_none());
    assert!(store
        .apply(3, upsert_token(token(1, "client", &["readonly"])))
        .rejection()
        .is_none());
    let snap = store.snapshot();
    let t = snap.acl_token_by_secret(&uuid(101)).expect("resolves");
    assert_eq!(t.accessor_id, uuid(1));
    assert_eq!((t.create_index, t.modify_index), (3, 3));
    assert_eq!(snap.table_index(Table::AclTokens), 3);
    assert_eq!(snap.table_index(Table::AclPolicies), 2);

    // Another token may not take the same secret.
    let mut thief = token(2, "management", &[]);
    thief.secret_id = uuid(101);
    assert!(matches!(
        store.apply(4, upsert_token(thief)).rejection(),
        Some(ApplyError::AclRefused { .. })
    ));
    // An update keeps the secret and the create index.
    let mut renamed = token(1, "client", &["readonly"]);
    renamed.name = "renamed".into();
    renamed.secret_id = uuid(200);
    assert!(store.apply(5, upsert_token(renamed)).rejection().is_none());
    let snap = store.snapshot();
    let t = snap.acl_token_by_accessor(&uuid(1)).unwrap();
    assert_eq!(
        (t.name.as_str(), t.secret_id.as_str(), t.create_index),
        ("renamed", uuid(101).as_str(), 3)
    );
    assert!(snap.acl_token_by_secret(&uuid(200)).is_none());

    // Deleting the token forgets its secret; deleting it again is refused.
    let delete = || {
        Command::AclTokenDelete(AclTokenDelete {
            accessor_ids: vec![uuid(1)],
        })
    };
    assert!(store.apply(6, delete()).rejection().is_none());
    assert!(store.snapshot().acl_token_by_secret(&uuid(101)).is_none());
    assert!(matches!(
        store.apply(7, delete()).rejection(),
        Some(ApplyError::AclNotFound { .. })
    ));
    let delete_policy = || {
        Command::AclPolicyDelete(AclPolicyDelete {
            names: vec!["readonly".into()],
        })
    };
    assert!(store.apply(8, delete_policy()).rejection().is_none());
    assert!(store.snapshot().acl_policy("readonly").is_none());
    assert!(store.apply(9, delete_policy()).rejection().is_some());
}

#[test]
fn bad_policies_and_tokens_change_nothing() {
    let store = StateStore::new();
    assert!(store.apply(1, policy("bad name", "")).rejection().is_some());
    assert!(store
        .apply(2, upsert_token(token(1, "client", &[])))
        .rejection()
        .is_some());
    let mut not_uuid = token(2, "management", &[]);
    not_uuid.secret_id = "secret".into();
    assert!(store.apply(3, upsert_token(not_uuid)).rejection().is_some());
    let snap = store.snapshot();
    assert_eq!(snap.acl_policies().count() + snap.acl_tokens().count(), 0);
}

#[test]
fn bootstrap_happens_once_then_only_with_the_reset_index() {
    let store = StateStore::new();
    let boot = |n: u8, reset_index: u64| {
        Command::AclBootstrap(AclBootstrap {
            token: token(n, "management", &[]),
            reset_index,
        })
    };
    assert!(matches!(
        store
            .apply(
                1,
                Command::AclBootstrap(AclBootstrap {
                    token: token(9, "client", &["x"]),
                    reset_index: 0,
                })
            )
            .rejection(),
        Some(ApplyError::AclRefused { .. })
    ));
    assert!(store.apply(2, boot(1, 0)).rejection().is_none());
    assert_eq!(store.snapshot().acl_bootstrap_index(), 2);
    assert!(matches!(
        store.apply(3, boot(2, 0)).rejection(),
        Some(ApplyError::AclBootstrapDone {
            reset_index: 2,
            given: 0
        })
    ));
    assert!(matches!(
        store.apply(4, boot(2, 7)).rejection(),
        Some(ApplyError::AclBootstrapDone {
            reset_index: 2,
            given: 7
        })
    ));
    assert!(store.apply(5, boot(2, 2)).rejection().is_none());
    let snap = store.snapshot();
    assert_eq!(snap.acl_bootstrap_index(), 5);
    // The first bootstrap token stays (as Nomad's reset leaves it).
    assert!(snap.acl_token_by_secret(&uuid(101)).is_some());
    assert!(snap.acl_token_by_secret(&uuid(102)).is_some());
}

#[test]
fn acls_survive_a_snapshot_image() {
    let store = StateStore::new();
    store.apply(1, policy("ops", r#"node { policy = "write" }"#));
    store.apply(2, upsert_token(token(1, "client", &["ops"])));
    store.apply(
        3,
        Command::AclBootstrap(AclBootstrap {
            token: token(2, "management", &[]),
            reset_index: 0,
        }),
    );
    let image = store.snapshot().encode_image().unwrap();
    let restored = StateStore::new();
    restored.restore_image(&image).unwrap();
    let snap = restored.snapshot();
    assert_eq!(
        snap.acl_policy("ops").unwrap().rules,
        r#"node { policy = "write" }"#
    );
    assert_eq!(
        snap.acl_token_by_secret(&uuid(101)).unwrap().policies,
        ["ops"]
    );
    assert_eq!(snap.acl_bootstrap_index(), 3);
}
