//! Ctrl-C and SIGTERM: the first asks a run to stop after the requests in flight, the second
//! exits at once. Every stop of a run is a [`CancellationToken`]: the process's, and a child of
//! it per fleet organization, which its own budget can also cancel.

use tokio_util::sync::CancellationToken;

use crate::exit;

/// A stop cancelled by the first Ctrl-C or SIGTERM; a second one exits at once.
pub fn stop_signal() -> CancellationToken {
    let stop = CancellationToken::new();
    let raise = stop.clone();
    tokio::spawn(async move {
        wait_for_shutdown().await;
        tracing::warn!("stopping after the requests in flight; press Ctrl-C again to quit at once");
        raise.cancel();
        wait_for_shutdown().await;
        std::process::exit(i32::from(exit::INTERRUPTED));
    });
    stop
}

pub async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
