//! The fleet warehouse's writer ([`crate::load::fleet`]): one thread owns it for the whole
//! `fleet run`, answers each organization's preflight, and loads the organizations whose
//! extracts have finished in batches.
//!
//! A batch closes when it has `size` organizations, or `wait` after its first one joined,
//! whichever comes first; each organization's sync waits for its batch's commit. After a batch,
//! the Parquet tree and the readers' snapshot are published if the last publish is at least
//! `publish_every` old, and always when the run ends. One DuckDB start serves the whole run.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{oneshot, Semaphore};

use crate::extract::{ExtractConfig, ExtractReport, Snapshot};
use crate::load::fleet::{BatchConfig, FleetWarehouse, Member};
use crate::load::{LoadError, LoadReport};
use crate::out::OutDir;
use crate::sync::SharedWarehouse;
use crate::Error;

/// How the fleet's organizations are batched.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    /// A batch closes with this many organizations…
    pub size: usize,
    /// …or this long after its first organization joined.
    pub wait: Duration,
    /// The readers' snapshot and the Parquet tree are published after a batch when the last
    /// publish is this old, and when the run ends.
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

enum Request {
    Previous { org: String, own: OutDir, config: ExtractConfig, reply: Reply<(ExtractConfig, Option<Snapshot>)> },
    Load { member: Box<Member>, reply: Reply<LoadReport> },
    Actions { org: String, own: OutDir, reply: Reply<()> },
}

/// The running writer.
pub struct Batcher {
    requests: mpsc::Sender<Request>,
    thread: std::thread::JoinHandle<Result<(), LoadError>>,
    /// Landings read into memory and not yet loaded: at most two batches' worth (one loading,
    /// one gathering), however many extracts finish at once.
    landings: Arc<Semaphore>,
}

impl Batcher {
    /// Opens the fleet warehouse under `out` (the caller holds the fleet's `--out` lock) and
    /// starts its thread.
    pub fn start(out: &OutDir, options: BatchOptions) -> Result<Batcher, Error> {
        let warehouse = FleetWarehouse::open(out, options.config.parquet_grace)?;
        let landings = Arc::new(Semaphore::new(2 * options.size.max(1)));
        let (requests, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fleet-warehouse".into())
            .spawn(move || serve(warehouse, inbox, options))
            .map_err(|e| Error::Io { context: "start the fleet warehouse's thread".into(), source: e })?;
        Ok(Batcher { requests, thread, landings })
    }

    /// The handle an organization's sync loads through.
    pub fn handle(&self, org: &str, own: &OutDir) -> OrgWarehouse {
        OrgWarehouse {
            org: org.to_owned(),
            own: own.clone(),
            requests: self.requests.clone(),
            landings: self.landings.clone(),
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
    requests: mpsc::Sender<Request>,
    landings: Arc<Semaphore>,
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

    fn load(&self, report: ExtractReport) -> BoxFuture<'_, Result<LoadReport, Error>> {
        Box::pin(async move {
            // The landing is read here, on a blocking thread, while the writer loads earlier
            // batches; the permit bounds the landings held in memory.
            let _held = self.landings.clone().acquire_owned().await.map_err(|_| stopped())?;
            let (own, run_id, checked) = (self.own.clone(), report.run_id.clone(), report.clone());
            let extracted =
                crate::sync::blocking("landing", move || crate::load::read_checked(&own, &run_id, Some(&checked)))
                    .await?;
            let member = Member { org: self.org.clone(), extracted, report: Some(report) };
            self.ask(|reply| Request::Load { member: Box::new(member), reply }).await
        })
    }

    fn record_actions(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.ask(|reply| Request::Actions { org: self.org.clone(), own: self.own.clone(), reply })
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
fn serve(mut w: FleetWarehouse, inbox: mpsc::Receiver<Request>, options: BatchOptions) -> Result<(), LoadError> {
    let mut batch: Vec<(Member, Reply<LoadReport>)> = vec![];
    let mut opened: Option<Instant> = None;
    let mut published = Instant::now();
    loop {
        // Wake for the open batch's deadline, and for the publish of loaded data when it is due.
        let batch_due = opened.map(|t| options.wait.saturating_sub(t.elapsed()));
        let publish_due = w.unpublished().then(|| options.publish_every.saturating_sub(published.elapsed()));
        let timeout = batch_due.into_iter().chain(publish_due).min().unwrap_or(Duration::from_secs(3600));
        let ended = match inbox.recv_timeout(timeout) {
            Ok(Request::Previous { org, own, config, reply }) => {
                let answer = w
                    .adopt(&org, &own)
                    .and_then(|_| w.with_org(&org, |conn| crate::sync::read_previous_from(conn, &config)));
                let _ = reply.send(answer.map_err(Error::from));
                false
            }
            Ok(Request::Actions { org, own, reply }) => {
                let _ = reply.send(w.record_actions(&org, &own).map_err(Error::from));
                false
            }
            Ok(Request::Load { member, reply }) => {
                opened.get_or_insert_with(Instant::now);
                batch.push((*member, reply));
                false
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => true,
        };
        let due = opened.is_some_and(|t| t.elapsed() >= options.wait);
        if !batch.is_empty() && (ended || due || batch.len() >= options.size) {
            let (members, replies): (Vec<Member>, Vec<Reply<LoadReport>>) =
                std::mem::take(&mut batch).into_iter().unzip();
            opened = None;
            let started = Instant::now();
            let size = members.len();
            for ((org, outcome), reply) in w.load(members, &options.config).into_iter().zip(replies) {
                if let Err(e) = &outcome {
                    tracing::warn!(organization = %org, error = %e, "the organization's load failed; the rest of its batch loads");
                }
                let _ = reply.send(outcome.map_err(Error::from));
            }
            tracing::info!(organizations = size, ms = started.elapsed().as_millis() as u64, "batch loaded");
        }
        if ended {
            return w.publish();
        }
        if w.unpublished() && published.elapsed() >= options.publish_every {
            publish(&mut w);
            published = Instant::now();
        }
    }
}

/// A publish between batches: a failure is a warning (the next publish, at the latest the
/// run's last, does it again).
fn publish(w: &mut FleetWarehouse) {
    let started = Instant::now();
    match w.publish() {
        Ok(()) => tracing::info!(ms = started.elapsed().as_millis() as u64, "fleet warehouse published"),
        Err(e) => tracing::warn!(error = %e, "cannot publish the fleet warehouse now; the next publish does"),
    }
}
