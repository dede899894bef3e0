//! Integration tests of the transport: real servers and pools on loopback.
//!
//! Real sockets mean real time (paused time would jump past every deadline while a socket
//! is busy), so nothing here sleeps for a fixed time to let something happen: every wait is
//! on a condition, bounded by [`DEADLINE`], and no test asserts how fast anything is.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{Fatal, InstallSnapshotError, RPCError, RaftError, SnapshotMismatch};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, SnapshotSegmentId,
    Vote,
};
use teamster_storage::raft_types::{ServerAddr, ServerId, TypeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::frame::{encode_frame, Header, LENGTH_PREFIX_LEN, PROTOCOL_VERSION};
use super::*;

/// The bound on every wait; generous, since the machine is shared.
const DEADLINE: Duration = Duration::from_secs(20);
/// The raft id of the server under test.
const SERVER: ServerId = 2;
/// The raft id the pools call as.
const ME: ServerId = 1;

// Vote terms select the canned handler's behaviour.
/// Terms from here on are part of the ordered batch (see [`Canned::ordered`]).
const ORDERED_BASE: u64 = 100;
/// Answered with a remote raft error (`Fatal::Stopped`).
const TERM_FATAL: u64 = 666;
/// Answered with a response of the wrong kind.
const TERM_WRONG_KIND: u64 = 777;
/// Answered with a handler error.
const TERM_UNSUPPORTED: u64 = 888;
/// The handler panics.
const TERM_PANIC: u64 = 999;
/// Held until the gate opens.
const TERM_GATED: u64 = 1000;
/// An InstallSnapshot chunk at this offset is held until the gate opens.
const OFFSET_GATED: u64 = 1000;
/// An InstallSnapshot chunk at this offset is answered with `SnapshotMismatch`.
const OFFSET_MISMATCH: u64 = 13;
/// An AppendEntries with this prev index is answered with a remote `Fatal::Panicked`.
const PREV_FATAL: u64 = 13;

/// A handler with canned raft answers that records what it saw.
struct Canned {
    /// (kind, context) of every request the handler got, in arrival order.
    seen: Mutex<Vec<(&'static str, RequestContext)>>,
    /// Gated requests wait for `true`.
    gate: watch::Sender<bool>,
    /// Gated requests that have started.
    gated_started: watch::Sender<usize>,
    /// How many of the ordered batch must arrive before any is answered.
    ordered: usize,
    arrived: watch::Sender<usize>,
    released: watch::Sender<usize>,
    /// Ordered-batch indexes in the order their handlers finished.
    finished: Mutex<Vec<usize>>,
}

impl Canned {
    fn new(ordered: usize) -> Arc<Self> {
        Arc::new(Self {
            seen: Mutex::new(Vec::new()),
            gate: watch::channel(false).0,
            gated_started: watch::channel(0).0,
            ordered,
            arrived: watch::channel(0).0,
            released: watch::channel(0).0,
            finished: Mutex::new(Vec::new()),
        })
    }

    fn seen(&self) -> Vec<(&'static str, RequestContext)> {
        self.seen.lock().expect("lock").clone()
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    async fn wait_gated_started(&self, n: usize) {
        let mut rx = self.gated_started.subscribe();
        tokio::time::timeout(DEADLINE, rx.wait_for(|s| *s >= n))
            .await
            .expect("gated request did not start")
            .expect("sender alive");
    }

    async fn held_at_gate(&self) {
        self.gated_started.send_modify(|n| *n += 1);
        let mut rx = self.gate.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }

    async fn handle(
        self: Arc<Self>,
        ctx: RequestContext,
        req: RpcRequest,
    ) -> Result<RpcResponse, RpcError> {
        let req_kind = req.kind();
        self.seen.lock().expect("lock").push((req_kind, ctx));
        match req {
            RpcRequest::Vote(v) => self.vote(v).await,
            RpcRequest::AppendEntries(a) => {
                if a.prev_log_id.map(|l| l.index) == Some(PREV_FATAL) {
                    return Ok(RpcResponse::AppendEntries(Err(RaftError::Fatal(
                        Fatal::Panicked,
                    ))));
                }
                Ok(RpcResponse::AppendEntries(Ok(
                    AppendEntriesResponse::Success,
                )))
            }
            RpcRequest::InstallSnapshot(s) => {
                if s.offset == OFFSET_GATED {
                    self.held_at_gate().await;
                }
                if s.offset == OFFSET_MISMATCH {
                    let segment = SnapshotSegmentId {
                        id: "s-1".into(),
                        offset: 0,
                    };
                    return Ok(RpcResponse::InstallSnapshot(Err(RaftError::APIError(
                        InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                            expect: segment.clone(),
                            got: segment,
                        }),
                    ))));
                }
                Ok(RpcResponse::InstallSnapshot(Ok(InstallSnapshotResponse {
                    vote: s.vote,
                })))
            }
            RpcRequest::Service(ServiceRequest::EvalAck(_)) => {
                Ok(RpcResponse::Service(Ok(ServiceResponse::EvalAck(()))))
            }
            RpcRequest::Service(call) => Ok(RpcResponse::Service(Err(ServiceError::not_found(
                "call",
                call.method().name,
            )))),
            RpcRequest::AuthService(authed) => {
                Ok(RpcResponse::Service(Err(ServiceError::PermissionDenied {
                    reason: format!("{} with a token", authed.call.method().name),
                })))
            }
            RpcRequest::Ping => Err(RpcError::Remote("Ping reached the handler".into())),
            RpcRequest::ServerInfo
            | RpcRequest::ReadIndex
            | RpcRequest::TimeoutNow
            | RpcRequest::KeyringKek(_) => Err(RpcError::Unsupported {
                kind: req_kind.into(),
            }),
        }
    }

    async fn vote(&self, v: VoteRequest<ServerId>) -> Result<RpcResponse, RpcError> {
        let term = v.vote.leader_id.term;
        let echo = || {
            Ok(RpcResponse::Vote(Ok(VoteResponse::new(
                v.vote,
                v.last_log_id,
                true,
            ))))
        };
        match term {
            TERM_FATAL => Ok(RpcResponse::Vote(Err(RaftError::Fatal(Fatal::Stopped)))),
            TERM_WRONG_KIND => Ok(RpcResponse::Ping { server_id: 0 }),
            TERM_UNSUPPORTED => Err(RpcError::Unsupported {
                kind: "Raft.Vote".into(),
            }),
            TERM_PANIC => panic!("canned handler panics on purpose"),
            TERM_GATED => {
                self.held_at_gate().await;
                echo()
            }
            t if (ORDERED_BASE..ORDERED_BASE + self.ordered as u64).contains(&t) => {
                // Answer the ordered batch last-first, once all of it has arrived.
                let i = (t - ORDERED_BASE) as usize;
                self.arrived.send_modify(|n| *n += 1);
                let _ = self
                    .arrived
                    .subscribe()
                    .wait_for(|n| *n >= self.ordered)
                    .await;
                let _ = self
                    .released
                    .subscribe()
                    .wait_for(|n| *n == self.ordered - 1 - i)
                    .await;
                self.finished.lock().expect("lock").push(i);
                self.released.send_modify(|n| *n += 1);
                echo()
            }
            _ => echo(),
        }
    }
}

struct Fixture {
    server: RpcServer,
    canned: Arc<Canned>,
    addr: String,
}

async fn start_on(bind: &str, config: RpcConfig, ordered: usize) -> Fixture {
    let canned = Canned::new(ordered);
    let handler_state = canned.clone();
    let handler =
        move |ctx: RequestContext, req: RpcRequest| handler_state.clone().handle(ctx, req);
    let server = RpcServer::bind(bind, SERVER, Arc::new(handler), config)
        .await
        .expect("bind");
    let addr = server.local_addr().to_string();
    Fixture {
        server,
        canned,
        addr,
    }
}

async fn start() -> Fixture {
    start_on("127.0.0.1:0", RpcConfig::for_tests(), 0).await
}

fn pool() -> Pool {
    Pool::new(ME, RpcConfig::for_tests()).expect("pool")
}

/// A pool whose reconnect backoff starts at `min`, for tests that look at backing off and
/// must not see it expire on a slow machine.
fn pool_with_backoff(min: Duration) -> Pool {
    let config = RpcConfig {
        reconnect_backoff_min: min,
        reconnect_backoff_max: min * 4,
        ..RpcConfig::for_tests()
    };
    Pool::new(ME, config).expect("pool")
}

fn vote(term: u64) -> RpcRequest {
    RpcRequest::Vote(VoteRequest::new(Vote::new(term, ME), None))
}

fn voted_term(resp: Result<RpcResponse, RpcError>) -> u64 {
    match resp {
        Ok(RpcResponse::Vote(Ok(r))) => r.vote.leader_id.term,
        other => panic!("expected a vote answer, got {other:?}"),
    }
}

fn log_id(index: u64) -> LogId<ServerId> {
    LogId::new(CommittedLeaderId::new(1, ME), index)
}

fn append(prev: Option<u64>, entries: usize) -> AppendEntriesRequest<TypeConfig> {
    let start = prev.unwrap_or(0) + 1;
    AppendEntriesRequest {
        vote: Vote::new_committed(1, ME),
        prev_log_id: prev.map(log_id),
        entries: (0..entries as u64)
            .map(|i| Entry {
                log_id: log_id(start + i),
                payload: EntryPayload::Blank,
            })
            .collect(),
        leader_commit: None,
    }
}

fn chunk(offset: u64) -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: Vote::new_committed(1, ME),
        meta: SnapshotMeta::default(),
        offset,
        data: vec![7; 1000],
        done: false,
    }
}

fn server_addr(rpc_addr: &str) -> ServerAddr {
    ServerAddr {
        name: "s2".into(),
        rpc_addr: rpc_addr.to_string(),
        http_addr: String::new(),
    }
}

const CALL: Duration = Duration::from_secs(10);

/// Poll `f` until it yields a value, panicking after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Read from `stream` until the server closes it (EOF or reset), ignoring anything it sends.
async fn expect_closed(stream: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 4096];
    let outcome = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("server kept the connection open after {what}"));
    if let Err(e) = outcome {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset,
            "unexpected error after {what}: {e}"
        );
    }
}

/// An address nothing listens on.
async fn dead_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test]
async fn requests_round_trip_by_id_and_by_address() {
    let f = start().await;
    let pool = pool();

    assert_eq!(
        voted_term(pool.call(SERVER, &f.addr, vote(7), CALL).await),
        7
    );
    match pool.call(SERVER, &f.addr, RpcRequest::Ping, CALL).await {
        Ok(RpcResponse::Ping { server_id }) => assert_eq!(server_id, SERVER),
        other => panic!("{other:?}"),
    }
    let ack = |call: &str| {
        ServiceRequest::EvalAck(service::eval::EvalAckRequest {
            eval_id: call.into(),
            token: "t".into(),
        })
    };
    assert!(matches!(
        pool.service(SERVER, &f.addr, ack("e1"), CALL).await,
        Ok(ServiceResponse::EvalAck(()))
    ));
    // A service error travels back typed.
    let nack = ServiceRequest::EvalNack(service::eval::EvalAckRequest {
        eval_id: "e1".into(),
        token: "t".into(),
    });
    assert_eq!(
        pool.service(SERVER, &f.addr, nack, CALL)
            .await
            .expect_err("refused"),
        ServiceError::not_found("call", "Eval.Nack")
    );

    // A client agent (id 0) learns the server's id from its address.
    let agent = Pool::new(0, RpcConfig::for_tests()).expect("pool");
    assert_eq!(agent.ping_addr(&f.addr, CALL).await.expect("ping"), SERVER);
    // ... and may not send raft traffic by address.
    assert!(matches!(
        agent.call_addr(&f.addr, vote(1), CALL).await,
        Err(RpcError::TargetRequired { .. })
    ));

    // The handler saw the sender ids from the headers; Ping never reached it.
    let seen = f.canned.seen();
    let kinds: Vec<_> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["Raft.Vote", "Eval.Ack", "Eval.Nack"]);
    assert!(seen.iter().all(|(_, ctx)| ctx.from == ME));
    f.server.shutdown().await;
}

#[tokio::test]
async fn concurrent_calls_share_one_connection_and_complete_out_of_order() {
    const N: usize = 16;
    let f = start_on("127.0.0.1:0", RpcConfig::for_tests(), N).await;
    let pool = pool();
    let calls = (0..N as u64).map(|i| {
        let pool = pool.clone();
        let addr = f.addr.clone();
        async move { pool.call(SERVER, &addr, vote(ORDERED_BASE + i), CALL).await }
    });
    let answers = tokio::time::timeout(DEADLINE, futures::future::join_all(calls))
        .await
        .expect("batch answered");
    for (i, answer) in answers.into_iter().enumerate() {
        assert_eq!(
            voted_term(answer),
            ORDERED_BASE + i as u64,
            "answer {i} mismatched"
        );
    }
    // The server answered last-first, and every call still got its own answer.
    let finished = f.canned.finished.lock().expect("lock").clone();
    assert_eq!(finished, (0..N).rev().collect::<Vec<_>>());
    // All on one connection.
    let seen = f.canned.seen();
    assert_eq!(seen.len(), N);
    assert!(seen
        .iter()
        .all(|(_, ctx)| ctx.connection == seen[0].1.connection));
    assert_eq!(pool.open_connections(), 1);
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_slow_request_does_not_block_a_fast_one_on_the_same_connection() {
    let f = start().await;
    let pool = pool();
    let slow = tokio::spawn({
        let (pool, addr) = (pool.clone(), f.addr.clone());
        async move { pool.call(SERVER, &addr, vote(TERM_GATED), CALL).await }
    });
    f.canned.wait_gated_started(1).await;
    assert_eq!(
        voted_term(pool.call(SERVER, &f.addr, vote(1), CALL).await),
        1
    );
    assert!(
        !slow.is_finished(),
        "the slow call is still held at the gate"
    );
    f.canned.open_gate();
    let slow = tokio::time::timeout(DEADLINE, slow)
        .await
        .expect("slow call ends")
        .expect("join");
    assert_eq!(voted_term(slow), TERM_GATED);
    let seen = f.canned.seen();
    assert_eq!(seen[0].1.connection, seen[1].1.connection, "one connection");
    f.server.shutdown().await;
}

#[tokio::test]
async fn refused_frames_close_only_their_own_connection() {
    let f = start().await;
    let pool = pool();
    let max = RpcConfig::for_tests().max_frame_len;
    assert_eq!(
        voted_term(pool.call(SERVER, &f.addr, vote(1), CALL).await),
        1
    );
    let control_conn = f.canned.seen()[0].1.connection;

    let mut wrong_version = encode_frame(&Header::request(1, ME, SERVER), &vote(1), max)
        .expect("encode")
        .to_vec();
    wrong_version[LENGTH_PREFIX_LEN] = PROTOCOL_VERSION + 1;
    let mut oversized = (u32::MAX).to_be_bytes().to_vec();
    oversized.extend_from_slice(&[PROTOCOL_VERSION, 0, 0, 0]);
    let bad: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: teamster\r\n\r\n".to_vec(),
        ),
        (
            "short garbage",
            vec![0, 0, 0, 30, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45],
        ),
        ("an oversized length prefix", oversized),
        ("a wrong protocol version", wrong_version),
        (
            "a frame for another server id",
            encode_frame(&Header::request(1, ME, 77), &vote(1), max)
                .expect("encode")
                .to_vec(),
        ),
        (
            "an undecodable body",
            encode_frame(&Header::request(1, ME, SERVER), &(250u8, 1u8), max)
                .expect("encode")
                .to_vec(),
        ),
        (
            "a raft request for target 0",
            encode_frame(&Header::request(1, ME, 0), &vote(1), max)
                .expect("encode")
                .to_vec(),
        ),
        (
            "a response frame sent to the server",
            encode_frame(
                &Header::response_to(&Header::request(1, SERVER, ME), ME),
                &Ok::<_, RpcError>(RpcResponse::Ping { server_id: ME }),
                max,
            )
            .expect("encode")
            .to_vec(),
        ),
    ];
    for (what, bytes) in bad {
        let mut raw = TcpStream::connect(&f.addr).await.expect("connect");
        raw.write_all(&bytes).await.expect("write");
        expect_closed(&mut raw, what).await;
        // The pool's connection is untouched and keeps getting answers.
        assert_eq!(
            voted_term(pool.call(SERVER, &f.addr, vote(2), CALL).await),
            2,
            "after {what}"
        );
        let (_, ctx) = f.canned.seen().pop().expect("seen");
        assert_eq!(ctx.connection, control_conn, "after {what}");
    }
    // Only the pool's good calls reached the handler.
    assert!(f
        .canned
        .seen()
        .iter()
        .all(|(_, ctx)| ctx.connection == control_conn));

    // Control: a well-formed frame on a raw connection is answered, and the connection stays.
    let mut raw = TcpStream::connect(&f.addr).await.expect("connect");
    for id in [5u64, 6] {
        raw.write_all(&ping(id, max)).await.expect("write");
        let decoded = read_answer(&mut raw, id, max).await;
        assert_eq!(decoded.header.sender, SERVER);
        let body: Result<RpcResponse, RpcError> = frame::decode_body(&decoded.body).expect("body");
        assert!(matches!(body, Ok(RpcResponse::Ping { server_id: SERVER })));
    }
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_peer_that_is_down_is_unreachable_and_backed_off() {
    let addr = dead_addr().await.to_string();
    let pool = pool_with_backoff(Duration::from_secs(60));
    match pool.call(SERVER, &addr, vote(1), CALL).await {
        Err(RpcError::Unreachable { reason, .. }) => {
            assert!(reason.contains("connect failed"), "{reason}")
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // The next call does not dial again while the slot backs off.
    match pool.call(SERVER, &addr, vote(1), CALL).await {
        Err(RpcError::Unreachable { reason, .. }) => {
            assert!(reason.contains("backing off"), "{reason}")
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // Through openraft's network too.
    let mut factory = NetworkFactory::new(pool.clone());
    let mut net = factory.new_client(SERVER, &server_addr(&addr)).await;
    let err = net
        .vote(
            VoteRequest::new(Vote::new(1, ME), None),
            RPCOption::new(CALL),
        )
        .await
        .expect_err("down");
    assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
/// A silent peer is a timeout for openraft (it retries at once), not unreachable (it would
/// stop replicating to it for a backoff); a snapshot chunk likewise.
async fn a_peer_that_never_answers_times_out_as_a_timeout() {
    // Accepts connections and reads everything, answers nothing.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            held.push(tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            }));
        }
    });
    let pool = pool();
    let short = Duration::from_millis(200);
    match pool.call(SERVER, &addr, vote(1), short).await {
        Err(RpcError::Timeout { after_ms, .. }) => assert_eq!(after_ms, 200),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let mut factory = NetworkFactory::new(pool.clone());
    let mut net = factory.new_client(SERVER, &server_addr(&addr)).await;
    let err = net
        .append_entries(append(None, 0), RPCOption::new(short))
        .await
        .expect_err("silent");
    assert!(
        matches!(&err, RPCError::Timeout(t) if t.timeout == short && t.target == SERVER),
        "{err:?}"
    );
    let err = net
        .install_snapshot(chunk(0), RPCOption::new(short))
        .await
        .expect_err("silent");
    assert!(matches!(err, RPCError::Timeout(_)), "{err:?}");
    silent.abort();
}

#[tokio::test]
async fn pending_calls_fail_at_once_when_the_connection_dies() {
    let f = start().await;
    let pool = pool();
    let long = Duration::from_secs(3600);
    let stuck = tokio::spawn({
        let (pool, addr) = (pool.clone(), f.addr.clone());
        async move { pool.call(SERVER, &addr, vote(TERM_GATED), long).await }
    });
    f.canned.wait_gated_started(1).await;
    f.server.shutdown().await;
    let result = tokio::time::timeout(DEADLINE, stuck)
        .await
        .expect("pending call failed before its deadline")
        .expect("join");
    // The request reached the server, so it may have been served: not "unreachable".
    assert!(
        matches!(result, Err(RpcError::ConnectionLost { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn the_pool_reconnects_to_a_peer_restarted_on_the_same_address() {
    let f = start().await;
    let addr = f.addr.clone();
    let pool = pool();
    assert_eq!(voted_term(pool.call(SERVER, &addr, vote(1), CALL).await), 1);
    let first_local = f.canned.seen()[0].1.peer_addr;
    f.server.shutdown().await;

    // While it is down, calls fail at once as a transport failure (not by deadline): refused
    // when dialled, or lost when the pool still held the closing connection.
    let down = pool.call(SERVER, &addr, vote(2), CALL).await;
    assert!(
        matches!(
            down,
            Err(RpcError::Unreachable { .. } | RpcError::ConnectionLost { .. })
        ),
        "{down:?}"
    );

    let again = start_on(&addr, RpcConfig::for_tests(), 0).await;
    let term = eventually("the pool to reconnect", || {
        let pool = pool.clone();
        let addr = addr.clone();
        async move { pool.call(SERVER, &addr, vote(3), CALL).await.ok() }
    })
    .await;
    assert_eq!(voted_term(Ok(term)), 3);
    let seen = again.canned.seen();
    assert_eq!(seen.len(), 1);
    assert_ne!(seen[0].1.peer_addr, first_local, "a new connection");
    assert_eq!(pool.open_connections(), 1);
    again.server.shutdown().await;
}

#[tokio::test]
async fn snapshot_chunks_travel_on_their_own_connection() {
    let f = start().await;
    let pool = pool();
    let mut factory = NetworkFactory::new(pool.clone());
    let mut net = factory.new_client(SERVER, &server_addr(&f.addr)).await;
    let opt = RPCOption::new(CALL);

    // A chunk held by the follower does not hold up heartbeats or votes.
    let held = tokio::spawn({
        let mut net = net.clone();
        let opt = opt.clone();
        async move { net.install_snapshot(chunk(OFFSET_GATED), opt).await }
    });
    f.canned.wait_gated_started(1).await;
    assert_eq!(
        net.append_entries(append(None, 0), opt.clone())
            .await
            .expect("heartbeat"),
        AppendEntriesResponse::Success
    );
    assert!(net
        .vote(VoteRequest::new(Vote::new(5, ME), None), opt.clone())
        .await
        .is_ok());
    assert!(!held.is_finished());
    f.canned.open_gate();
    let resp = tokio::time::timeout(DEADLINE, held)
        .await
        .expect("chunk answered")
        .expect("join");
    assert_eq!(resp.expect("installed").vote, Vote::new_committed(1, ME));

    let seen = f.canned.seen();
    let conn_of = |kind: &str| {
        seen.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, ctx)| (ctx.connection, ctx.peer_addr))
            .collect::<BTreeSet<_>>()
    };
    let bulk = conn_of("Raft.InstallSnapshot");
    let mut control = conn_of("Raft.AppendEntries");
    control.extend(conn_of("Raft.Vote"));
    assert_eq!(bulk.len(), 1);
    assert_eq!(
        control.len(),
        1,
        "heartbeats and votes share the control connection"
    );
    assert!(
        bulk.is_disjoint(&control),
        "snapshot lane is a separate TCP connection"
    );
    assert_eq!(pool.open_connections(), 2);
    f.server.shutdown().await;
}

#[tokio::test]
async fn the_connection_limit_holds_further_connections_back() {
    let config = RpcConfig {
        max_connections: 1,
        ..RpcConfig::for_tests()
    };
    let f = start_on("127.0.0.1:0", config, 0).await;
    let first = pool();
    assert_eq!(
        voted_term(first.call(SERVER, &f.addr, vote(1), CALL).await),
        1
    );

    let second = pool();
    let held = second
        .call(SERVER, &f.addr, vote(2), Duration::from_millis(300))
        .await;
    assert!(matches!(held, Err(RpcError::Timeout { .. })), "{held:?}");

    drop(first); // closes its connection and frees the server's slot
    let term = eventually("the second pool to be served", || {
        let (pool, addr) = (second.clone(), f.addr.clone());
        async move {
            pool.call(SERVER, &addr, vote(3), Duration::from_millis(500))
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(voted_term(Ok(term)), 3);
    f.server.shutdown().await;
}

#[tokio::test]
async fn a_panicking_handler_answers_an_error_and_the_connection_survives() {
    let f = start().await;
    let pool = pool();
    match pool.call(SERVER, &f.addr, vote(TERM_PANIC), CALL).await {
        Err(RpcError::Remote(msg)) => assert!(msg.contains("panicked"), "{msg}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    assert_eq!(
        voted_term(pool.call(SERVER, &f.addr, vote(4), CALL).await),
        4
    );
    let seen = f.canned.seen();
    assert_eq!(seen[0].1.connection, seen[1].1.connection);
    f.server.shutdown().await;
}

#[tokio::test]
async fn the_raft_network_maps_answers_and_errors() {
    let f = start().await;
    let pool = pool();
    let node = server_addr(&f.addr);
    let mut factory = NetworkFactory::new(pool.clone());
    let mut net = factory.new_client(SERVER, &node).await;
    assert_eq!(pool.open_connections(), 0, "new_client does not connect");
    let opt = RPCOption::new(CALL);

    assert_eq!(
        net.append_entries(append(Some(1), 3), opt.clone())
            .await
            .expect("ok"),
        AppendEntriesResponse::Success
    );
    match net
        .append_entries(append(Some(PREV_FATAL), 1), opt.clone())
        .await
    {
        Err(RPCError::RemoteError(e)) => {
            assert_eq!(e.target, SERVER);
            assert_eq!(e.target_node.as_ref(), Some(&node));
            assert_eq!(e.source, RaftError::Fatal(Fatal::Panicked));
        }
        other => panic!("expected RemoteError, got {other:?}"),
    }
    let granted = net
        .vote(
            VoteRequest::new(Vote::new(9, ME), Some(log_id(3))),
            opt.clone(),
        )
        .await
        .expect("vote");
    assert_eq!(
        granted,
        VoteResponse::new(Vote::new(9, ME), Some(log_id(3)), true)
    );
    match net
        .vote(
            VoteRequest::new(Vote::new(TERM_FATAL, ME), None),
            opt.clone(),
        )
        .await
    {
        Err(RPCError::RemoteError(e)) => assert_eq!(e.source, RaftError::Fatal(Fatal::Stopped)),
        other => panic!("expected RemoteError, got {other:?}"),
    }
    for term in [TERM_WRONG_KIND, TERM_UNSUPPORTED] {
        match net
            .vote(VoteRequest::new(Vote::new(term, ME), None), opt.clone())
            .await
        {
            Err(RPCError::Network(_)) => {}
            other => panic!("term {term}: expected Network, got {other:?}"),
        }
    }
    assert!(net.install_snapshot(chunk(0), opt.clone()).await.is_ok());
    match net
        .install_snapshot(chunk(OFFSET_MISMATCH), opt.clone())
        .await
    {
        Err(RPCError::RemoteError(e)) => assert!(
            matches!(
                e.source,
                RaftError::APIError(InstallSnapshotError::SnapshotMismatch(_))
            ),
            "{e:?}"
        ),
        other => panic!("expected RemoteError, got {other:?}"),
    }
    f.server.shutdown().await;
}

#[tokio::test]
async fn raft_traffic_for_another_server_id_is_refused_as_unreachable() {
    let f = start().await;
    let pool = pool_with_backoff(Duration::from_secs(60));
    let mut factory = NetworkFactory::new(pool.clone());
    // Membership says server 3 lives at server 2's address (a reused IP, a stale entry).
    let mut wrong = factory.new_client(3, &server_addr(&f.addr)).await;
    let err = wrong
        .vote(
            VoteRequest::new(Vote::new(1, ME), None),
            RPCOption::new(CALL),
        )
        .await
        .expect_err("refused");
    assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    assert!(f.canned.seen().is_empty(), "the handler never saw it");
    // A connection refused before any answer counts as a failed dial: no redial storm.
    match pool.call(3, &f.addr, vote(1), CALL).await {
        Err(RpcError::Unreachable { reason, .. }) => {
            assert!(reason.contains("after 1 failed attempts"), "{reason}")
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // Server 2 itself is still served.
    let mut right = factory.new_client(SERVER, &server_addr(&f.addr)).await;
    assert!(right
        .vote(
            VoteRequest::new(Vote::new(1, ME), None),
            RPCOption::new(CALL)
        )
        .await
        .is_ok());
    f.server.shutdown().await;
}

#[tokio::test]
async fn oversized_append_entries_asks_openraft_for_fewer_entries() {
    let f = start().await;
    let config = RpcConfig {
        max_frame_len: 2048,
        ..RpcConfig::for_tests()
    };
    let pool = Pool::new(ME, config).expect("pool");
    let mut factory = NetworkFactory::new(pool.clone());
    let mut net = factory.new_client(SERVER, &server_addr(&f.addr)).await;
    let opt = RPCOption::new(CALL);

    let hint = match net.append_entries(append(Some(1), 2000), opt.clone()).await {
        Err(RPCError::PayloadTooLarge(too_large)) => too_large.entries_hint(),
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    };
    assert!((1..2000).contains(&hint), "hint {hint}");
    // The hinted batch fits.
    assert_eq!(
        net.append_entries(append(Some(1), hint as usize), opt.clone())
            .await
            .expect("fits"),
        AppendEntriesResponse::Success
    );

    // A single entry that can never fit is a plain network error, not a retry loop.
    let nodes: BTreeMap<ServerId, ServerAddr> = (1..=100u64)
        .map(|id| {
            (
                id,
                server_addr(&format!("a-rather-long-host-name-{id}.example:4647")),
            )
        })
        .collect();
    let members: BTreeSet<ServerId> = nodes.keys().copied().collect();
    let mut huge = append(Some(1), 0);
    huge.entries.push(Entry {
        log_id: log_id(2),
        payload: EntryPayload::Membership(Membership::new(vec![members], nodes)),
    });
    match net.append_entries(huge, opt).await {
        Err(RPCError::Network(_)) => {}
        other => panic!("expected Network, got {other:?}"),
    }
    f.server.shutdown().await;
}

#[test]
fn the_frame_limit_must_hold_a_snapshot_chunk() {
    let raft = openraft::Config {
        snapshot_max_chunk_size: 3 << 20,
        ..Default::default()
    };
    assert!(RpcConfig::default().validate_for_raft(&raft).is_ok());
    let small = RpcConfig {
        max_frame_len: 1 << 20,
        ..RpcConfig::default()
    };
    assert!(matches!(
        small.validate_for_raft(&raft),
        Err(RpcError::InvalidConfig(_))
    ));
}

/// Reads one answer frame from a raw connection, checks it answers `id` and returns it.
async fn read_answer(raw: &mut TcpStream, id: u64, max: usize) -> frame::Frame {
    let mut prefix = [0u8; 4];
    raw.read_exact(&mut prefix).await.expect("answer");
    let mut rest = vec![0u8; u32::from_be_bytes(prefix) as usize];
    raw.read_exact(&mut rest).await.expect("answer");
    let mut frame = bytes::BytesMut::from(&prefix[..]);
    frame.extend_from_slice(&rest);
    let decoded = tokio_util::codec::Decoder::decode(&mut frame::FrameCodec::new(max), &mut frame)
        .expect("valid")
        .expect("complete");
    assert_eq!(decoded.header.request_id, id);
    decoded
}

fn ping(id: u64, max: usize) -> bytes::Bytes {
    encode_frame(&Header::request(id, 0, 0), &RpcRequest::Ping, max).expect("enc")
}

/// A config whose deadlines a test can watch pass.
fn short_limits(limits: RpcLimits) -> RpcConfig {
    RpcConfig {
        limits,
        ..RpcConfig::for_tests()
    }
}

/// Issue 52: a connection could declare a 64 MiB frame, send part of it and be held with
/// its buffer forever. Now the frame must be complete within `frame_timeout` of its first
/// byte, and the server keeps answering others meanwhile.
#[tokio::test]
async fn a_frame_sent_in_part_closes_its_connection_at_the_frame_deadline() {
    let config = short_limits(RpcLimits {
        frame_timeout: Duration::from_millis(300),
        ..RpcLimits::default()
    });
    let max = config.max_frame_len;
    let f = start_on("127.0.0.1:0", config, 0).await;
    let mut raw = TcpStream::connect(&f.addr).await.expect("connect");
    // A first frame answered, then the start of one declaring the largest length allowed.
    raw.write_all(&ping(1, max)).await.expect("write");
    read_answer(&mut raw, 1, max).await;
    let mut partial = ((max - 8) as u32).to_be_bytes().to_vec();
    partial.extend_from_slice(&[PROTOCOL_VERSION, 0]);
    partial.extend_from_slice(&[0u8; 4096]);
    raw.write_all(&partial).await.expect("write");
    let started = Instant::now();
    let pool = pool();
    assert_eq!(
        voted_term(pool.call(SERVER, &f.addr, vote(1), CALL).await),
        1
    );
    expect_closed(&mut raw, "a frame left half sent").await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    f.server.shutdown().await;
}

/// A connection that sends nothing is closed at the handshake deadline; one whose requests
/// are done and that sends nothing more, at the idle deadline; a connection that keeps
/// talking stays.
#[tokio::test]
async fn silent_and_idle_connections_are_closed_by_their_deadlines() {
    let config = short_limits(RpcLimits {
        handshake_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(1500),
        ..RpcLimits::default()
    });
    let max = config.max_frame_len;
    let f = start_on("127.0.0.1:0", config, 0).await;
    let mut silent = TcpStream::connect(&f.addr).await.expect("connect");
    let mut idle = TcpStream::connect(&f.addr).await.expect("connect");
    idle.write_all(&ping(1, max)).await.expect("write");
    read_answer(&mut idle, 1, max).await;
    let mut busy = TcpStream::connect(&f.addr).await.expect("connect");
    busy.write_all(&ping(9, max)).await.expect("busy write");
    read_answer(&mut busy, 9, max).await;
    expect_closed(&mut silent, "no frame within the handshake timeout").await;
    let opened = Instant::now();
    // `busy` talks every 200 ms, well inside the idle timeout, for two idle timeouts.
    let mut id = 10;
    while opened.elapsed() < Duration::from_millis(3200) {
        busy.write_all(&ping(id, max)).await.expect("busy write");
        read_answer(&mut busy, id, max).await;
        id += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    expect_closed(&mut idle, "nothing received past the idle timeout").await;
    busy.write_all(&ping(id, max)).await.expect("busy write");
    read_answer(&mut busy, id, max).await;
    f.server.shutdown().await;
}

/// Issue 52: 1 100 idle connections filled the 1 024 slots and new connections got no
/// answer. One address may hold `max_conns_per_client`; another address is served.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections() {
    let config = short_limits(RpcLimits {
        max_conns_per_client: 3,
        ..RpcLimits::default()
    });
    let max = config.max_frame_len;
    let f = start_on("127.0.0.1:0", config, 0).await;
    let from = |ip: &str| {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let addr = f.addr.clone();
        async move {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind(SocketAddr::new(ip, 0)).expect("bind");
            socket
                .connect(addr.parse().expect("addr"))
                .await
                .expect("connect")
        }
    };
    let mut held = Vec::new();
    for i in 0..3 {
        let mut c = from("127.0.0.1").await;
        c.write_all(&ping(i, max)).await.expect("write");
        read_answer(&mut c, i, max).await;
        held.push(c);
    }
    let mut over = from("127.0.0.1").await;
    expect_closed(&mut over, "a fourth connection from one address").await;
    let mut other = from("127.0.0.2").await;
    other.write_all(&ping(9, max)).await.expect("write");
    read_answer(&mut other, 9, max).await;
    // A slot freed is a slot again.
    drop(held.pop());
    let mut again = eventually("a connection from the first address served again", || {
        let from = &from;
        async move {
            let mut c = from("127.0.0.1").await;
            c.write_all(&ping(20, max)).await.ok()?;
            tokio::time::timeout(Duration::from_millis(500), read_answer(&mut c, 20, max))
                .await
                .ok()?;
            Some(c)
        }
    })
    .await;
    again.write_all(&ping(21, max)).await.expect("write");
    read_answer(&mut again, 21, max).await;
    f.server.shutdown().await;
}
