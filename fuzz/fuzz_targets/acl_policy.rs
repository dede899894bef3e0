//! An ACL policy's rules as `PUT /v1/acl/policy/:name` takes them (HCL, or JSON when the text
//! starts with `{`): parsed, then compiled with the management-less resolver's
//! `Acl::from_policies` and asked a few questions. Any input must end in a policy or an
//! error, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster::acl::{Acl, Capability, Need};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = teamster::acl::parse_policy(text) else {
        return;
    };
    let acl = Acl::from_policies([&policy]);
    let _ = acl.namespace_caps("default");
    let _ = acl.allows_namespace("web-1", &[Capability::SubmitJob, Capability::ReadJob]);
    let _ = acl.namespace_visible("prod");
    let _ = acl.allows(&Need::NodeWrite);
    let _ = acl.allows(&Need::OperatorRead);
});
