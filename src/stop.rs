//! Ctrl-C and SIGTERM: the first asks a run to stop after the requests in flight, the second
//! exits at once.

use tokio::sync::watch;

use crate::exit;

/// A stop flag raised by the first Ctrl-C or SIGTERM; a second one exits at once.
pub fn stop_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_shutdown().await;
        tracing::warn!("stopping after the requests in flight; press Ctrl-C again to quit at once");
        let _ = tx.send(true);
        wait_for_shutdown().await;
        std::process::exit(i32::from(exit::INTERRUPTED));
    });
    rx
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
