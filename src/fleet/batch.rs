//! The fleet warehouse's writer ([`crate::load::fleet_warehouse`]): one thread owns it for the whole
//! `fleet run`, answers each organization's preflight, and loads the organizations whose
//! extracts have finished in batches.
//!
//! A batch closes when it has `size` organizations, or `wait` after its first one joined,
//! whichever comes first, or at once when no other organization can still join it (every other
//! organization's sync has loaded or ended); each organization's sync waits for its batch's commit.
//! A closed batch's previous rows are read on the writer's connection (and a member whose rows
//! must be read alone is merged there); the rest of its merge, its transform and its staging
//! run on a thread of their own, which touches no warehouse, while the writer commits the batch
//! before it and answers preflights; at most one batch is being prepared. After a batch,
//! the Parquet tree and the readers' snapshot are published if the oldest load not yet
//! published is at least `publish_every` old, and always when the run ends. One DuckDB start
//! serves the whole run.
//!
//! With a lake, the organizations a batch loaded are then committed to it together: their rows
//! of each table staged from the fleet warehouse and committed as one Delta commit per table
//! (`organization IN (…)`), `runs` last, on the runtime while the writer goes on with the next
//! batch. Each organization's sync resumes when its batch's lake commits have landed.

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{oneshot, Semaphore};

use crate::extract::{ExtractConfig, ExtractReport, Extracted, Snapshot};
use crate::load::fleet_warehouse::{prepare_batch, BatchConfig, BatchRead, FleetWarehouse, Member, PreparedBatch};
use crate::load::lake::LakeConfig;
use crate::load::{LoadError, LoadReport};
use crate::out::OutDir;
use crate::sync::{SharedWarehouse, Stage, StageLog};
use crate::Error;

/// How the fleet's organizations are batched.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    /// A batch closes with this many organizations…
    pub size: usize,
    /// …or this long after its first organization joined.
    pub wait: Duration,
    /// The readers' snapshot and the Parquet tree are published after a batch when the oldest
    /// load not yet published is this old, and when the run ends.
    pub publish_every: Duration,
    pub config: BatchConfig,
}

/// The default batch size (`--batch-size`).
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// The default batch latency (`--batch-wait`).
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_secs(2);
/// The default publish interval (`--publish-every`).
pub const DEFAULT_PUBLISH_EVERY: Duration = Duration::from_secs(30);

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// How a batch answers a member: when its rows are committed to the fleet warehouse, then with
/// its load's report (after its batch's lake commit, with a lake).
type LoadAnswers = (oneshot::Sender<()>, Reply<LoadReport>);

enum Request {
    Previous {
        org: String,
        own: OutDir,
        config: ExtractConfig,
        reply: Reply<(ExtractConfig, Option<Snapshot>)>,
    },
    /// `committed` hears when the member's rows are committed to the fleet warehouse, before
    /// its batch's lake commit answers `reply`.
    Load {
        member: Box<Member>,
        committed: oneshot::Sender<()>,
        reply: Reply<LoadReport>,
    },
    Actions {
        org: String,
        own: OutDir,
        reply: Reply<()>,
    },
    KnownRuns {
        org: String,
        own: OutDir,
        reply: Reply<BTreeSet<String>>,
    },
    Restored {
        org: String,
        own: OutDir,
        everything: bool,
        reply: Reply<()>,
    },
    Stage {
        org: String,
        tables: Vec<&'static str>,
        dir: std::path::PathBuf,
        reply: Reply<()>,
    },
    /// The organization's sync has ended (its handle is dropped): what is held of its rows goes.
    Ended {
        org: String,
    },
}

/// The running writer.
pub struct Batcher {
    requests: mpsc::Sender<Request>,
    thread: std::thread::JoinHandle<Result<(), LoadError>>,
    /// Landings read into memory and not yet answered: at most three batches' worth (so that
    /// one gathers while one commits and the next is prepared), however many extracts finish at
    /// once.
    landings: Arc<Semaphore>,
    /// The landings handed over by the extracts that wait in memory for a place among
    /// `landings`, in KiB: at most [`WAITING_LANDINGS_KIB`]; one that finds no room is dropped
    /// and read back when its place comes, as a landing not handed over is.
    waiting: Arc<Semaphore>,
    /// The handles that may still send a load.
    to_load: Arc<std::sync::atomic::AtomicUsize>,
    /// The organizations' own heavy steps outside the warehouse, at most two at once (the
    /// cores of a small machine): [`crate::sync::SharedWarehouse::limit`].
    limit: Arc<Semaphore>,
}

impl Batcher {
    /// Opens the fleet warehouse under `out` (the caller holds the fleet's `--out` lock) and
    /// starts its thread.
    /// `names` are the fleet's organizations, in the order their syncs start.
    pub fn start(out: &OutDir, options: BatchOptions, names: Vec<String>) -> Result<Batcher, Error> {
        let warehouse = FleetWarehouse::open(out, options.config.parquet_grace)?;
        // The lake commits run on the caller's runtime (this is called from one of its
        // blocking threads).
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::Io {
            context: "start the fleet warehouse's thread".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let landings = Arc::new(Semaphore::new(LANDINGS_IN_BATCHES * options.size.max(1)));
        let to_load = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waiting = to_load.clone();
        let (requests, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fleet-warehouse".into())
            .spawn(move || serve(warehouse, inbox, options, runtime, waiting, names))
            .map_err(|e| Error::Io { context: "start the fleet warehouse's thread".into(), source: e })?;
        let waiting = Arc::new(Semaphore::new(WAITING_LANDINGS_KIB));
        Ok(Batcher { requests, thread, landings, waiting, to_load, limit: Arc::new(Semaphore::new(2)) })
    }

    /// The handle an organization's sync loads through; `actions`: it has an actions stage.
    pub fn handle(&self, org: &str, own: &OutDir, lake: Option<LakeConfig>, actions: bool) -> OrgWarehouse {
        OrgWarehouse {
            org: org.to_owned(),
            own: own.clone(),
            lake,
            actions,
            limit: self.limit.clone(),
            requests: self.requests.clone(),
            landings: self.landings.clone(),
            waiting: self.waiting.clone(),
            to_load: LoadToCome::new(&self.to_load),
        }
    }

    /// Waits for the last batch and the last publish, once every handle is dropped.
    pub fn finish(self) -> Result<(), Error> {
        drop(self.requests);
        match self.thread.join() {
            Ok(result) => Ok(result?),
            Err(_) => Err(Error::Io {
                context: "the fleet warehouse's thread".into(),
                source: std::io::Error::other("it panicked (a bug): see the log"),
            }),
        }
    }
}

/// One organization's way into the fleet warehouse.
pub struct OrgWarehouse {
    org: String,
    /// The organization's own directory: its landing and its journal's warehouse.
    own: OutDir,
    /// The lake its rows are committed to, with its batch's.
    lake: Option<LakeConfig>,
    /// It has an actions stage: its `runs` row reaches the lake after its journal.
    actions: bool,
    limit: Arc<Semaphore>,
    requests: mpsc::Sender<Request>,
    landings: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    to_load: LoadToCome,
}

/// One organization's place in the count of loads still to come: counted from its handle's
/// creation until its load is sent or its handle is dropped, so that the writer closes a batch at
/// once when nothing else can join it.
struct LoadToCome {
    count: Arc<std::sync::atomic::AtomicUsize>,
    counted: std::sync::atomic::AtomicBool,
}

impl LoadToCome {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        LoadToCome { count: count.clone(), counted: std::sync::atomic::AtomicBool::new(true) }
    }

    /// The load is sent (or will never be): no longer to come.
    fn done(&self) {
        if self.counted.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for OrgWarehouse {
    fn drop(&mut self) {
        // The writer may be gone already (a failed start): nothing is held then.
        let _ = self.requests.send(Request::Ended { org: std::mem::take(&mut self.org) });
    }
}

impl Drop for LoadToCome {
    fn drop(&mut self) {
        self.done();
    }
}

impl OrgWarehouse {
    fn ask<T: Send + 'static>(&self, request: impl FnOnce(Reply<T>) -> Request) -> BoxFuture<'_, Result<T, Error>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.requests.send(request(reply)).is_ok();
        Box::pin(async move {
            match answer.await {
                Ok(result) if sent => result,
                _ => Err(stopped()),
            }
        })
    }
}

impl SharedWarehouse for OrgWarehouse {
    fn previous(&self, config: ExtractConfig) -> BoxFuture<'_, Result<(ExtractConfig, Option<Snapshot>), Error>> {
        self.ask(|reply| Request::Previous { org: self.org.clone(), own: self.own.clone(), config, reply })
    }

    fn load<'a>(
        &'a self,
        report: ExtractReport,
        landed: Option<Extracted>,
        log: &'a StageLog,
    ) -> BoxFuture<'a, Result<LoadReport, Error>> {
        Box::pin(async move {
            // The permit bounds the loads gathered for the batches. The landing the extract
            // handed over waits for it in memory if the waiting ones leave room for it; one that
            // was not handed over, or found no room, is read back here, on a blocking thread,
            // while the writer loads earlier batches.
            let landed = landed.and_then(|l| {
                let kib = u32::try_from(l.approximate_bytes().div_ceil(1024)).unwrap_or(u32::MAX);
                let room = self.waiting.clone().try_acquire_many_owned(kib).ok();
                if room.is_none() {
                    tracing::debug!(org = %self.org, kib, "no room for the landing to wait in memory; read back at its turn");
                }
                room.map(|room| (l, room))
            });
            let _held = self.landings.clone().acquire_owned().await.map_err(|_| stopped())?;
            // Now among the gathered ones.
            let landed = landed.map(|(l, _room)| l);
            let (own, run_id, checked) = (self.own.clone(), report.run_id.clone(), report.clone());
            let extracted = crate::sync::blocking("landing", move || {
                crate::load::read_checked(&own, &run_id, Some(&checked), landed)
            })
            .await?;
            let member = Member {
                org: self.org.clone(),
                extracted,
                report: Some(report),
                lake: self.lake.clone(),
                actions: self.actions,
            };
            // Counted out once the request is in the channel: a writer that sees no load to
            // come finds every sent one there.
            let run_id = member.extracted.spec.run_id.clone();
            let (committed, on_commit) = oneshot::channel();
            let answer = self.ask(|reply| Request::Load { member: Box::new(member), committed, reply });
            self.to_load.done();
            // Committed to the fleet warehouse: what is left is the batch's lake commit, the
            // lake stage's (a load that failed drops `committed` unsent).
            if on_commit.await.is_ok() {
                if self.lake.is_some() {
                    log.done_then_enter(Stage::Load, Some(&run_id), Stage::Lake);
                } else {
                    log.done(Stage::Load, Some(&run_id));
                }
            }
            answer.await
        })
    }

    fn record_actions(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.ask(|reply| Request::Actions { org: self.org.clone(), own: self.own.clone(), reply })
    }

    fn known_runs(&self) -> BoxFuture<'_, Result<BTreeSet<String>, Error>> {
        self.ask(|reply| Request::KnownRuns { org: self.org.clone(), own: self.own.clone(), reply })
    }

    fn take_restored(&self, everything: bool) -> BoxFuture<'_, Result<(), Error>> {
        self.ask(|reply| Request::Restored { org: self.org.clone(), own: self.own.clone(), everything, reply })
    }

    fn stage_for_lake(&self, tables: Vec<&'static str>, dir: std::path::PathBuf) -> BoxFuture<'_, Result<(), Error>> {
        self.ask(|reply| Request::Stage { org: self.org.clone(), tables, dir, reply })
    }

    fn limit(&self) -> &Semaphore {
        &self.limit
    }
}

/// The writer's thread is gone: it panicked (a bug).
fn stopped() -> Error {
    Error::Io {
        context: "the fleet warehouse's thread".into(),
        source: std::io::Error::other("it stopped before answering (a bug): see the log"),
    }
}

/// The writer's loop: answers preflights at once, gathers loads into batches, and publishes.
fn serve(
    mut w: FleetWarehouse,
    inbox: mpsc::Receiver<Request>,
    options: BatchOptions,
    runtime: tokio::runtime::Handle,
    to_load: Arc<std::sync::atomic::AtomicUsize>,
    names: Vec<String>,
) -> Result<(), LoadError> {
    let mut batch: Vec<(Member, LoadAnswers)> = vec![];
    let mut opened: Option<Instant> = None;
    // The batch being prepared on a thread of its own: at most one, while the writer commits
    // the one before it and answers the organizations.
    let mut preparing: Option<Preparing> = None;
    // When the oldest load not yet published was committed (or a publish of it failed): a
    // publish is due `publish_every` after it, so loaded data waits at most that long (and a
    // batch), and a run whose loads all fit in that time publishes once, at its end.
    // A warehouse left unpublished by a killed run counts from now.
    let mut unpublished_since: Option<Instant> = w.unpublished().then(Instant::now);
    // The organizations whose previous state has not been asked yet, in the fleet's order
    // (those that asked are dropped from its front, and skipped further on): their syncs start
    // together, so a read gathers the next ones' rows with its own.
    let mut to_ask: std::collections::VecDeque<String> = names.into();
    let mut asked: BTreeSet<String> = BTreeSet::new();
    // The organizations with loaded rows whose previous state was answered, in that order
    // (their loads come in about that order), and those whose load came: while the writer has
    // nothing else to do, the previous rows their loads merge with are read ahead, a batch at
    // a time, at most `READ_AHEAD` batches' worth held.
    let mut ahead: std::collections::VecDeque<(String, bool)> = std::collections::VecDeque::new();
    let mut came: BTreeSet<String> = BTreeSet::new();
    let held_at_most = READ_AHEAD * options.size.max(1);
    loop {
        // Wake for the open batch's deadline, and for the publish of loaded data when it is due.
        // No other organization can join the open batch: it closes once the channel is read.
        let nothing_to_come = || to_load.load(std::sync::atomic::Ordering::SeqCst) == 0;
        // A batch due while another is being prepared waits for that one: the poll below wakes
        // the writer then.
        let batch_due = opened.filter(|_| preparing.is_none()).map(|t| {
            if nothing_to_come() {
                Duration::ZERO
            } else {
                options.wait.saturating_sub(t.elapsed())
            }
        });
        let publish_due = unpublished_since.map(|t| options.publish_every.saturating_sub(t.elapsed()));
        // While a batch is being prepared, look every few milliseconds whether it is ready.
        let prepared_due = preparing.as_ref().map(|_| PREPARED_POLL);
        // Reading ahead waits for a quiet moment.
        let (held, held_bytes) = w.held_ahead();
        let idle = preparing.is_none()
            && batch.is_empty()
            && !ahead.is_empty()
            && held < held_at_most
            && held_bytes < READ_AHEAD_BYTES;
        let read_ahead_due = idle.then_some(READ_AHEAD_IDLE);
        let timeout = batch_due
            .into_iter()
            .chain(publish_due)
            .chain(prepared_due)
            .chain(read_ahead_due)
            .min()
            .unwrap_or(Duration::from_secs(3600));
        let received = inbox.recv_timeout(timeout);
        let timed_out = matches!(received, Err(mpsc::RecvTimeoutError::Timeout));
        if let Ok(Request::Previous { org, .. } | Request::Ended { org }) = &received {
            asked.insert(org.clone());
            while to_ask.front().is_some_and(|n| asked.contains(n)) {
                to_ask.pop_front();
            }
        }
        let ended = match received {
            Ok(Request::Previous { org, own, config, reply }) => {
                let started = Instant::now();
                // A load outside the whole scope keeps the loaded applications outside it.
                let statuses: Vec<String> = config.statuses.iter().map(|s| s.to_string()).collect();
                let narrowed = crate::load::prepare::keeps_out_of_scope(&statuses, config.campaign_id);
                let answer = w.adopt(&org, &own).and_then(|_| match w.has_loaded(&org) {
                    // Read with the next organizations' (their syncs start together), one query
                    // per table: up to a batch of those whose rows are not held yet. Their
                    // requests come in about, not exactly, the fleet's order (the runtime
                    // interleaves their tasks' starts), so the rows of a few batches are held at
                    // once, and at most `PREVIOUS_HELD` batches' worth.
                    true => {
                        let room = match w.holds_previous(&org) {
                            true => 0,
                            false => (PREVIOUS_HELD * options.size.max(1)).saturating_sub(w.previous_held()),
                        };
                        let next: Vec<String> = to_ask
                            .iter()
                            .filter(|n| !asked.contains(*n) && w.has_loaded(n) && !w.holds_previous(n))
                            .take((options.size.max(1) - 1).min(room))
                            .cloned()
                            .collect();
                        w.previous(
                            &org,
                            &next,
                            |rows, conn| crate::sync::previous_from_rows(rows, conn, &config),
                            |conn| crate::sync::read_previous_from(conn, &config),
                        )
                    }
                    // Nothing loaded: no snapshot and no content cursor, as reading would find.
                    false => Ok((ExtractConfig { content_cursor: None, ..config }, None)),
                });
                tracing::debug!(organization = %org, us = started.elapsed().as_micros() as u64, "previous state read");
                if w.has_loaded(&org) && !came.contains(&org) {
                    // A quick sync (it has a snapshot) or a narrowed one keeps loaded applications.
                    let quick = matches!(&answer, Ok((_, Some(_))));
                    ahead.push_back((org, quick || narrowed));
                }
                let _ = reply.send(answer.map_err(Error::from));
                false
            }
            Ok(Request::Actions { org, own, reply }) => {
                let _ = reply.send(w.record_actions(&org, &own).map_err(Error::from));
                false
            }
            Ok(Request::KnownRuns { org, own, reply }) => {
                let _ = reply.send(w.known_runs(&org, &own).map_err(Error::from));
                false
            }
            Ok(Request::Restored { org, own, everything, reply }) => {
                let _ = reply.send(w.take_restored(&org, &own, everything).map_err(Error::from));
                false
            }
            Ok(Request::Stage { org, tables, dir, reply }) => {
                let _ = reply.send(w.stage_lake(&[org], &tables, &dir).map(|_| ()).map_err(Error::from));
                false
            }
            Ok(Request::Ended { org }) => {
                came.insert(org.clone());
                w.forget_held(&org);
                false
            }
            Ok(Request::Load { member, committed, reply }) => {
                came.insert(member.org.clone());
                opened.get_or_insert_with(Instant::now);
                batch.push((*member, (committed, reply)));
                false
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => true,
        };
        let due = opened.is_some_and(|t| t.elapsed() >= options.wait) || (nothing_to_come() && timed_out);
        let close = !batch.is_empty() && (ended || due || batch.len() >= options.size);
        // A prepared batch is committed after the next one, when due, is read and sent off to
        // be prepared: that preparation overlaps this commit.
        let prepared = match &preparing {
            Some(p) if ended || p.is_ready() => preparing.take().map(Preparing::finished),
            _ => None,
        };
        if close && preparing.is_none() {
            preparing = Some(start_batch(&mut w, &mut batch, &options));
            opened = (!batch.is_empty()).then(Instant::now);
        }
        if let Some(prepared) = prepared {
            commit_batch(&mut w, &runtime, prepared);
        }
        if ended {
            // Every batch left, in turn (each prepared while the one before commits); then the
            // last publish.
            while let Some(prepared) = preparing.take() {
                let prepared = prepared.finished();
                if !batch.is_empty() {
                    preparing = Some(start_batch(&mut w, &mut batch, &options));
                }
                commit_batch(&mut w, &runtime, prepared);
            }
            let started = Instant::now();
            let published = w.publish();
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "last publish");
            return published;
        }
        if !w.unpublished() {
            unpublished_since = None;
        } else if unpublished_since.get_or_insert_with(Instant::now).elapsed() >= options.publish_every {
            publish(&mut w);
            // Published, or failed and tried again an interval later.
            unpublished_since = w.unpublished().then(Instant::now);
        }
        // Idle still: nothing came, no batch opened or is being prepared (a publish may have run).
        if timed_out && idle && preparing.is_none() && batch.is_empty() {
            // As many as the bytes left allow at the rows held so far's average (a batch's worth
            // when none are held).
            let by_bytes = match held {
                0 => usize::MAX,
                n => (READ_AHEAD_BYTES - held_bytes) / (held_bytes / n).max(1),
            };
            let room = held_at_most.saturating_sub(held).min(options.size.max(1)).min(by_bytes.max(1));
            read_ahead(&mut w, &mut ahead, &came, room);
        }
    }
}

/// Reads ahead the previous rows of up to `room` of the next organizations of `ahead` whose
/// load has not come nor sync ended (`came`) ([`FleetWarehouse::read_ahead`]).
fn read_ahead(
    w: &mut FleetWarehouse,
    ahead: &mut std::collections::VecDeque<(String, bool)>,
    came: &BTreeSet<String>,
    room: usize,
) {
    let mut orgs = vec![];
    while orgs.len() < room {
        match ahead.pop_front() {
            Some((org, apps)) if !came.contains(&org) => orgs.push((org, apps)),
            Some(_) => {}
            None => break,
        }
    }
    if !orgs.is_empty() {
        let started = Instant::now();
        let read = w.read_ahead(&orgs);
        tracing::debug!(organizations = read, ms = started.elapsed().as_millis() as u64, "previous rows read ahead");
    }
}

/// The landings held in memory, in batches: one gathering while one commits and the next is prepared.
const LANDINGS_IN_BATCHES: usize = 3;

/// The landings handed over that may wait in memory for their place among the gathered ones,
/// in KiB: 256 MiB.
const WAITING_LANDINGS_KIB: usize = 256 * 1024;

/// The organizations' previous states held before they ask, in batches: read a batch at a time
/// ahead of requests that come in about the fleet's order.
const PREVIOUS_HELD: usize = 8;

/// The previous rows of loads to come held, read ahead, in batches ([`FleetWarehouse::read_ahead`]),
/// and in bytes (about: [`crate::load::warehouse::LoadRows::approximate_bytes`]): a read ahead
/// starts only below both.
const READ_AHEAD: usize = 10;
const READ_AHEAD_BYTES: usize = 256 << 20;

/// How long the writer waits for a request before it reads ahead.
const READ_AHEAD_IDLE: Duration = Duration::from_millis(100);

/// How often the writer looks whether the batch being prepared is ready.
const PREPARED_POLL: Duration = Duration::from_millis(5);

/// A batch whose members' previous rows are read, being prepared on a thread of its own
/// ([`crate::load::fleet_warehouse::prepare_batch`]).
struct Preparing {
    work: Work,
    batch: Batch,
}

/// A batch's preparation: on its thread, or done (`None`: it panicked, on its thread or on the
/// writer's, or its thread never got the batch).
enum Work {
    Thread(std::thread::JoinHandle<Option<PreparedBatch>>),
    Done(Option<Box<PreparedBatch>>),
}

/// What the writer keeps of a batch while it is prepared: its members' answers and what their
/// lake commit needs.
struct Batch {
    orgs: Vec<String>,
    /// The batch's staging directory.
    staging: Option<std::path::PathBuf>,
    replies: Vec<LoadAnswers>,
    lake: Option<LakeConfig>,
    with_actions: BTreeSet<String>,
    started: Instant,
}

/// A batch whose preparation has ended: prepared, or `None` when it panicked.
struct Finished {
    prepared: Option<Box<PreparedBatch>>,
    batch: Batch,
}

impl Preparing {
    fn is_ready(&self) -> bool {
        match &self.work {
            Work::Thread(thread) => thread.is_finished(),
            Work::Done(_) => true,
        }
    }

    /// Waits for the preparation to end. A preparation that panicked leaves the batch's
    /// staging directory, which is removed here.
    fn finished(self) -> Finished {
        let prepared = match self.work {
            Work::Thread(thread) => thread.join().ok().flatten().map(Box::new),
            Work::Done(prepared) => prepared,
        };
        if let (None, Some(dir)) = (&prepared, &self.batch.staging) {
            let _ = std::fs::remove_dir_all(dir);
        }
        Finished { prepared, batch: self.batch }
    }
}

/// Closes a batch of at most `options.size` of the waiting members (the first to join): their
/// previous rows read on the writer's connection, then prepared on a thread of its own, which
/// touches no warehouse (the writer may reopen its file meanwhile, after a failure or a
/// publish).
fn start_batch(w: &mut FleetWarehouse, batch: &mut Vec<(Member, LoadAnswers)>, options: &BatchOptions) -> Preparing {
    let started = Instant::now();
    let taken: Vec<(Member, LoadAnswers)> = batch.drain(..batch.len().min(options.size.max(1))).collect();
    let (members, replies): (Vec<Member>, Vec<LoadAnswers>) = taken.into_iter().unzip();
    let lake = members.iter().find_map(|m| m.lake.clone());
    let with_actions: BTreeSet<String> = members.iter().filter(|m| m.actions).map(|m| m.org.clone()).collect();
    let read = w.read_batch(members);
    let (orgs, staging) = (read.organizations().to_vec(), read.staging_dir());
    // The read reaches the thread once it runs: if no thread can start, it is still here, and
    // is prepared on the writer's thread instead.
    let config = options.config.clone();
    let (to_thread, from_writer) = mpsc::channel::<BatchRead>();
    let spawned = std::thread::Builder::new()
        .name("fleet-prepare".into())
        .spawn(move || from_writer.recv().ok().map(|read| prepare_batch(read, &config)));
    // On the writer's thread, a panic is caught as the thread's would be.
    let here = |read: BatchRead| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prepare_batch(read, &options.config)))
            .ok()
            .map(Box::new)
    };
    let work = match spawned {
        Ok(thread) => match to_thread.send(read) {
            Ok(()) => Work::Thread(thread),
            Err(mpsc::SendError(read)) => Work::Done(here(read)),
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a thread to prepare the batch; preparing it on the writer's");
            Work::Done(here(read))
        }
    };
    // Prepared here or not, its staging is cleaned up by `finished` if the preparation panicked.
    Preparing { work, batch: Batch { orgs, staging, replies, lake, with_actions, started } }
}

/// Commits a prepared batch, answers its members, and sends the loaded ones to the lake.
fn commit_batch(w: &mut FleetWarehouse, runtime: &tokio::runtime::Handle, finished: Finished) {
    let Finished { prepared, batch: Batch { orgs, replies, lake, with_actions, started, .. } } = finished;
    let outcomes = match prepared {
        Some(prepared) => w.commit_batch(*prepared),
        None => orgs
            .into_iter()
            .map(|org| (org, Err(LoadError::Bug("preparing the batch panicked: see the log".into()))))
            .collect(),
    };
    let size = outcomes.len();
    let mut loaded = vec![];
    for ((org, outcome), (committed, reply)) in outcomes.into_iter().zip(replies) {
        if outcome.is_ok() {
            let _ = committed.send(());
        }
        match outcome {
            Ok(report) if lake.is_some() => {
                let actions = with_actions.contains(&org);
                loaded.push((org, actions, report, reply))
            }
            outcome => {
                if let Err(e) = &outcome {
                    tracing::warn!(organization = %org, error = %crate::exit::with_causes(e), "the organization's load failed; the rest of its batch loads");
                }
                let _ = reply.send(outcome.map_err(Error::from));
            }
        }
    }
    tracing::info!(organizations = size, ms = started.elapsed().as_millis() as u64, "batch loaded");
    if let Some(lake) = lake.filter(|_| !loaded.is_empty()) {
        commit_to_lake(w, runtime, lake, loaded);
    }
}

/// The lake tables whose commit marks an organization's sync complete: `runs`, and the actions'
/// results committed just before it. An organization with an actions stage commits them after
/// its journal, once its actions are done ([`OrgWarehouse`]'s `stage_for_lake`), as `run --lake`
/// does.
const LAST: [&str; 2] = ["action_results", "runs"];

/// Stages the loaded members' rows and commits them to the lake on the runtime, one commit per
/// table; each member's sync is answered when the commits are done. Members with an actions
/// stage get every table but [`LAST`] now. A failure is every member's: their rows are in the
/// fleet warehouse, and the lake gets them with their next load.
fn commit_to_lake(
    w: &mut FleetWarehouse,
    runtime: &tokio::runtime::Handle,
    lake: LakeConfig,
    mut loaded: Vec<(String, bool, LoadReport, Reply<LoadReport>)>,
) {
    loaded.sort_by(|a, b| a.0.cmp(&b.0));
    let orgs: Vec<String> = loaded.iter().map(|(org, ..)| org.clone()).collect();
    let complete: Vec<String> =
        loaded.iter().filter(|(_, actions, ..)| !actions).map(|(org, ..)| org.clone()).collect();
    let first: Vec<&'static str> =
        crate::load::catalog::lake_tables().into_iter().filter(|t| !LAST.contains(t)).collect();
    let staged = w.lake_staging().and_then(|dir| {
        let rows = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut rows = w.stage_lake(&orgs, &first, &dir)?;
            if !complete.is_empty() {
                for (org, counts) in w.stage_lake(&complete, &LAST, &dir)? {
                    rows.entry(org).or_default().extend(counts);
                }
            }
            Ok(rows)
        }))
        .unwrap_or_else(|_| {
            Err(LoadError::Lake("staging the batch for the lake panicked (a bug): see the log".into()))
        });
        if rows.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        rows.map(|rows| (dir, rows))
    });
    let (dir, mut staged_rows) = match staged {
        Ok(staged) => staged,
        Err(e) => {
            for (_, _, _, reply) in loaded {
                let _ = reply.send(Err(not_in_lake(&lake.url, &e, orgs.len())));
            }
            return;
        }
    };
    runtime.spawn(async move {
        let started = Instant::now();
        let mut committed = crate::load::lake::commit_organizations(&lake, &orgs, &dir, &first).await;
        if let (Ok(report), false) = (&mut committed, complete.is_empty()) {
            match crate::load::lake::commit_organizations(&lake, &complete, &dir, &LAST).await {
                Ok(last) => report.absorb(last),
                Err(e) => committed = Err(e),
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(path = %dir.display(), error = %e, "cannot remove a batch's staged lake files");
        }
        match &committed {
            Ok(c) => tracing::info!(
                organizations = orgs.len(),
                ms = started.elapsed().as_millis() as u64,
                conflicts_retried = c.conflicts_retried,
                "batch committed to the lake"
            ),
            Err(e) => tracing::warn!(organizations = orgs.len(), error = %crate::exit::with_causes(e), "the batch's lake commit failed"),
        }
        for (org, _, mut report, reply) in loaded {
            let answer = match &committed {
                Ok(c) => {
                    let rows = staged_rows.remove(&org).unwrap_or_default();
                    report.lake = Some(crate::load::lake::LakeReport { organization: org, rows, ..c.clone() });
                    Ok(report)
                }
                Err(e) => Err(not_in_lake(&lake.url, e, orgs.len())),
            };
            let _ = reply.send(answer);
        }
    });
}

/// A member's error when its batch could not be committed to the lake.
fn not_in_lake(url: &str, e: &LoadError, batch: usize) -> Error {
    LoadError::Lake(format!(
        "the organization is loaded into the fleet warehouse, but its batch of {batch} could not be committed to the lake `{url}`: {}",
        crate::exit::with_causes(e)
    ))
    .into()
}

/// A publish between batches: a failure is a warning (the next publish, at the latest the
/// run's last, does it again).
fn publish(w: &mut FleetWarehouse) {
    let started = Instant::now();
    match w.publish() {
        Ok(()) => tracing::info!(ms = started.elapsed().as_millis() as u64, "fleet warehouse published"),
        Err(e) => {
            tracing::warn!(error = %crate::exit::with_causes(&e), "cannot publish the fleet warehouse now; the next publish does")
        }
    }
}
