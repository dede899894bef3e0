//! Native service discovery: `GET /v1/services` (each namespace's service names and tags,
//! `?namespace=*` for every namespace), `GET /v1/service/:name` (its registrations, an empty
//! list for an unknown name; `?choose=N|KEY` for a stable subset of N by rendezvous
//! hashing, as Nomad's load-balancing clients ask), `DELETE /v1/service/:name/:id`. Reads are
//! blocking queries on the service registrations table, answered from this server's state.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{delete, get};
use axum::Router;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use teamster_storage::model::ServiceRegistration;
use teamster_storage::state::Table;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::service_reg::ServiceRegistrationDeleteRequest;
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/services", get(list))
        .route("/v1/service/{name}", get(get_one))
        .route("/v1/service/{name}/{id}", delete(delete_one))
}

/// `GET /v1/services`: `[{"Namespace", "Services": [{"ServiceName", "Tags"}]}]`, the tags
/// of every instance merged, sorted by namespace and name.
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Services]).await?;
    let mut by_ns: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for reg in snap
        .service_registrations()
        .filter(|r| opts.in_namespace(r.namespace.as_str()))
    {
        by_ns
            .entry(reg.namespace.to_string())
            .or_default()
            .entry(reg.service_name.clone())
            .or_default()
            .extend(reg.tags.iter().cloned());
    }
    let out: Vec<Value> = by_ns
        .into_iter()
        .map(|(ns, services)| {
            let services: Vec<Value> = services
                .into_iter()
                .map(|(name, tags)| json!({ "ServiceName": name, "Tags": tags }))
                .collect();
            json!({ "Namespace": ns, "Services": services })
        })
        .collect();
    Ok(json_read(out, meta))
}

/// `GET /v1/service/:name`: the registrations of the service in the namespace.
pub async fn get_one(
    State(ctx): State<HttpContext>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    if opts.namespace == "*" {
        return Err(ApiError::bad_request(
            "a service is read in one namespace; namespace=* lists services only",
        ));
    }
    let choose = match q.get("choose") {
        Some(c) => Some(parse_choose(c)?),
        None => None,
    };
    let (snap, meta) = ctx.read(&opts, &[Table::Services]).await?;
    let mut regs: Vec<ServiceRegistration> = snap
        .services_by_name(&opts.namespace, &name)
        .map(|r| (**r).clone())
        .collect();
    if let Some((n, key)) = choose {
        regs = choose_subset(regs, n, &key);
    }
    Ok(json_read(regs, meta))
}

/// `choose=N|KEY`: how many instances, and the key they are chosen for.
fn parse_choose(text: &str) -> Result<(usize, String), ApiError> {
    let bad = || ApiError::bad_request(format!("choose: {text:?} is not <number>|<key>"));
    let (n, key) = text.split_once('|').ok_or_else(bad)?;
    let n: usize = n.parse().map_err(|_| bad())?;
    if n == 0 || key.is_empty() {
        return Err(bad());
    }
    Ok((n, key.to_string()))
}

/// The `n` registrations that rank highest for `key` by rendezvous hashing over their
/// allocation IDs: the same key gets the same instances while they stay registered, and an
/// instance going away moves only the keys that had it.
fn choose_subset(regs: Vec<ServiceRegistration>, n: usize, key: &str) -> Vec<ServiceRegistration> {
    let mut ranked: Vec<([u8; 32], ServiceRegistration)> = regs
        .into_iter()
        .map(|r| {
            let mut h = Sha256::new();
            h.update(key.as_bytes());
            h.update([0]);
            h.update(r.alloc_id.as_str().as_bytes());
            (h.finalize().into(), r)
        })
        .collect();
    ranked.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    ranked.into_iter().take(n).map(|(_, r)| r).collect()
}

/// `DELETE /v1/service/:name/:id`: remove one registration (404 when there is none).
pub async fn delete_one(
    State(ctx): State<HttpContext>,
    Path((name, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    if opts.namespace == "*" {
        return Err(ApiError::bad_request(
            "a registration is deleted in one namespace",
        ));
    }
    let endpoints = ctx.endpoints()?;
    let index = endpoints
        .service_registration_delete(ServiceRegistrationDeleteRequest {
            namespace: opts.namespace.clone(),
            ids: vec![(name, id)],
            must_exist: true,
        })
        .await?;
    Ok(json_write(json!({ "Index": index }), index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(alloc: &str) -> ServiceRegistration {
        ServiceRegistration {
            alloc_id: alloc.into(),
            ..ServiceRegistration::default()
        }
    }

    #[test]
    fn choose_is_stable_and_moves_only_what_it_must() {
        let all: Vec<_> = ["a", "b", "c", "d", "e"].into_iter().map(reg).collect();
        let pick = |regs: &[ServiceRegistration], key: &str| -> Vec<String> {
            choose_subset(regs.to_vec(), 2, key)
                .into_iter()
                .map(|r| r.alloc_id.to_string())
                .collect()
        };
        let first = pick(&all, "client-1");
        assert_eq!(first.len(), 2);
        assert_eq!(pick(&all, "client-1"), first);
        // Removing an instance that was not chosen changes nothing.
        let unchosen: Vec<_> = all
            .iter()
            .filter(|r| !first.contains(&r.alloc_id.to_string()) || r.alloc_id.as_str() == "")
            .cloned()
            .collect();
        let kept: Vec<_> = all
            .iter()
            .filter(|r| r.alloc_id != unchosen[0].alloc_id)
            .cloned()
            .collect();
        assert_eq!(pick(&kept, "client-1"), first);
        assert!(parse_choose("2|k").is_ok());
        for bad in ["2", "x|k", "0|k", "2|"] {
            assert!(parse_choose(bad).is_err(), "{bad}");
        }
    }
}
