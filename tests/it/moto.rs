//! A local S3 server (`moto_server`, from PyPI) on a free port, for the lake's tests and its
//! benchmark (`benches/lake.rs` includes this file).

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What `moto_server -p 0` runs, but serving one request at a time. moto checks a conditional
/// write (`If-None-Match: *`, which Delta uses to claim a log version) and then stores it, so on
/// its threaded server two concurrent claims of one version could both succeed and one commit
/// vanish, which S3 itself never allows (a flaky lost organization in the lake tests). One
/// request at a time makes the check atomic, as on S3.
const SERVE: &str = r#"
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
run_simple("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=False, request_handler=MotoRequestHandler)
"#;

/// A local S3 server (moto) with a bucket, and the standard AWS variables that point at it.
/// Killed on drop.
pub struct Moto {
    child: Child,
    pub envs: Vec<(String, String)>,
}

impl Moto {
    /// Starts moto with the virtualenv whose `python` is given, and makes `bucket`.
    pub fn start(python: &Path, bucket: &str) -> Moto {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(python)
            .args(["-c", SERVE])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start moto with {}: {e}", python.display()));
        // Its log goes to stderr, one line per request: read the address, then keep draining.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                    let _ = tx.send(rest.trim().to_owned());
                }
            }
        });
        let port = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("moto_server printed its address");
        let envs = aws_envs(&port);
        let o = Command::new(python)
            .args(["-c", &format!("import boto3; boto3.client('s3').create_bucket(Bucket='{bucket}')")])
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(o.status.success(), "create the bucket: {}", String::from_utf8_lossy(&o.stderr));
        Moto { child, envs }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The standard AWS variables that point at a local S3 endpoint on `port`.
pub fn aws_envs(port: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}
