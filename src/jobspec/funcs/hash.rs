//! Hashes and identifiers: `md5`, `sha1`, `sha256`, `sha512` (lowercase hex of the UTF-8
//! bytes), `base64sha256`, `base64sha512` (the raw digest in base64), `uuidv4` (random) and
//! `uuidv5(namespace, name)` (namespace `"dns"`, `"url"`, `"oid"`, `"x500"` or a UUID).

use hcl::eval::FuncArgs;
use hcl::Value;
use sha2::Digest;

use super::{base64_encode, s, Out};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn md5(a: FuncArgs) -> Out {
    Ok(hex(&md5::Md5::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn sha1(a: FuncArgs) -> Out {
    Ok(hex(&sha1::Sha1::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn sha256(a: FuncArgs) -> Out {
    Ok(hex(&sha2::Sha256::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn sha512(a: FuncArgs) -> Out {
    Ok(hex(&sha2::Sha512::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn base64sha256(a: FuncArgs) -> Out {
    Ok(base64_encode(&sha2::Sha256::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn base64sha512(a: FuncArgs) -> Out {
    Ok(base64_encode(&sha2::Sha512::digest(s(&a[0]).as_bytes())).into())
}

pub(super) fn uuidv4(_: FuncArgs) -> Out {
    Ok(uuid::Uuid::new_v4().to_string().into())
}

pub(super) fn uuidv5(a: FuncArgs) -> Out {
    let namespace = match s(&a[0]) {
        "dns" => uuid::Uuid::NAMESPACE_DNS,
        "url" => uuid::Uuid::NAMESPACE_URL,
        "oid" => uuid::Uuid::NAMESPACE_OID,
        "x500" => uuid::Uuid::NAMESPACE_X500,
        other => uuid::Uuid::parse_str(other).map_err(|_| {
            format!(
                "uuidv5: the namespace must be \"dns\", \"url\", \"oid\", \"x500\" or a UUID, \
                 not {other:?}"
            )
        })?,
    };
    Ok(Value::from(
        uuid::Uuid::new_v5(&namespace, s(&a[1]).as_bytes()).to_string(),
    ))
}
