//! The crate's error, folding each stage's errors, and the exit code each maps to.

use thiserror::Error;

use crate::action::ActionError;
use crate::api::{ApiError, KeyError};
use crate::exit;
use crate::extract::ExtractError;
use crate::load::LoadError;
use crate::out::OutError;
use crate::query::QueryError;

#[derive(Debug, Error)]
pub enum Error {
    /// Invalid flags or configuration; every problem found, one per entry.
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Config(Vec<String>),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Extract(#[from] ExtractError),
    #[error(transparent)]
    Out(#[from] OutError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Action(#[from] ActionError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error("cannot listen on `{addr}`")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// Stopped by a first Ctrl-C or SIGTERM, before it was done; what was left.
    #[error("stopped by Ctrl-C or SIGTERM: {0}")]
    Interrupted(&'static str),
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::Key(_) => exit::USAGE,
            Error::Api(e) if e.is_auth() => exit::AUTH,
            Error::Api(ApiError::InvalidRequest(_)) => exit::USAGE,
            Error::Extract(ExtractError::Api { source, .. }) if source.is_auth() => exit::AUTH,
            Error::Extract(ExtractError::Interrupted | ExtractError::BudgetSpent { .. })
            | Error::Api(ApiError::Interrupted { .. } | ApiError::BudgetSpent { .. })
            | Error::Extract(ExtractError::Api { source: ApiError::Interrupted { .. }, .. }) => exit::INTERRUPTED,
            Error::Load(LoadError::Locked { .. }) | Error::Action(ActionError::Warehouse(LoadError::Locked { .. })) => {
                exit::LOCKED
            }
            Error::Out(OutError::Locked { .. }) | Error::Extract(ExtractError::Out(OutError::Locked { .. })) => {
                exit::LOCKED
            }
            Error::Load(
                LoadError::NoRuns(_)
                | LoadError::Incomplete(_)
                | LoadError::StaleQuick { .. }
                | LoadError::Kind(_)
                | LoadError::Extract(ExtractError::NoSuchRun(_)),
            ) => exit::USAGE,
            Error::Action(
                ActionError::Read { .. }
                | ActionError::Invalid { .. }
                | ActionError::TooManyRows { .. }
                | ActionError::Warehouse(LoadError::Kind(_)),
            ) => exit::USAGE,
            Error::Action(ActionError::Out(OutError::Locked { .. })) => exit::LOCKED,
            Error::Query(QueryError::Db(_) | QueryError::Lake(_) | QueryError::Warehouse(_)) => exit::FAILED,
            Error::Query(_) => exit::USAGE,
            Error::Interrupted(_) => exit::INTERRUPTED,
            _ => exit::FAILED,
        }
    }

    /// What reports, status files, lineage events and the HTML report keep of a failure: its
    /// [`report`](Self::report), except that a lock held by another process is named by its pid
    /// only: the holder's description (for the warehouse file, its command line, which may carry
    /// anything) stays on the terminal of the command that meets it.
    pub fn recorded(&self) -> String {
        let pid =
            |holder: &str| crate::out::holder_pid(holder).map_or("pid unknown".to_owned(), |p| format!("pid {p}"));
        match self {
            Error::Out(OutError::Locked { out, holder })
            | Error::Extract(ExtractError::Out(OutError::Locked { out, holder }))
            | Error::Action(ActionError::Out(OutError::Locked { out, holder })) => format!(
                "another run holds the lock on `{out}` ({}); wait for it to finish, or check that it is still running",
                pid(holder)
            ),
            Error::Load(LoadError::Locked { path, holder, snapshot })
            | Error::Action(ActionError::Warehouse(LoadError::Locked { path, holder, snapshot })) => format!(
                "the warehouse `{path}` is held by another process ({}); close it (readers use the snapshot `{snapshot}`), then rerun",
                pid(holder)
            ),
            e if e.exit_code() == exit::LOCKED => {
                format!("another process holds this organization's files ({})", pid(&e.report()))
            }
            e => e.report(),
        }
    }

    /// The message with its causes, `a: b: c`, each said once.
    pub fn report(&self) -> String {
        crate::exit::with_causes(self)
    }
}
