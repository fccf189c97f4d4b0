//! Raw landing: every response body exactly as received, one gzip-compressed JSON line per
//! response, with the endpoint, query (never the key), time and status.
//!
//! The landing is the single source of truth of a run. Resume state, drift decisions and
//! `load --from-raw` are all derived from it, so the record of what was fetched cannot disagree
//! with the data.
//!
//! Each invocation of a run writes its own segment, `part-NNNN.jsonl.gz`. While written it is
//! named `part-NNNN.jsonl.gz.partial`, and each record is written to the OS as a gzip member of
//! its own in one call, so a killed process leaves every record it reported as landed readable.
//! A record whose write fails is cut off again (the file goes back to its last whole member),
//! and the segment then stays partial. The next invocation recovers a leftover partial segment
//! into a complete one before it starts. Readers accept a truncated tail in a partial segment
//! only: a finished segment was synced whole, so a bad record in it is corruption, reported with
//! the file and line, never skipped.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};

use crate::out::{io_err, OutError};

/// One response as landed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawRecord {
    /// Order of arrival within the run, across invocations; later observations win.
    pub seq: u64,
    pub invocation: u32,
    /// `list_applications` or `content_24h`.
    pub endpoint: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub received_at: DateTime<Utc>,
    pub status: u16,
    pub attempts: u32,
    /// Applications: the crawl pass of the status this page belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<u32>,
    /// Content: the window `[start, end]` this response answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<(NaiveDate, NaiveDate)>,
    /// False when validation refused the response (a truncated series); it is kept to diagnose.
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The body as received.
    pub body: String,
}

fn segment_name(invocation: u32) -> String {
    format!("part-{invocation:04}.jsonl.gz")
}

/// Writes one invocation's segment: each record a gzip member of its own (a segment is their
/// concatenation, which a gzip reader reads as one stream), so that no compressor is held between
/// records: a compressor's state is about 370 KB, and a fleet holds a segment open for every
/// organization in flight (thousands).
pub struct RawWriter {
    partial: PathBuf,
    done: PathBuf,
    file: Option<File>,
    records: u64,
    /// The length of the segment's whole members.
    whole: u64,
    /// A write failed: the segment stays partial, for the next invocation to recover.
    failed: bool,
}

impl RawWriter {
    pub fn create(dir: &Path, invocation: u32) -> Result<Self, OutError> {
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let done = dir.join(segment_name(invocation));
        let partial = dir.join(format!("{}.partial", segment_name(invocation)));
        let file = File::create(&partial).map_err(io_err("create", &partial))?;
        Ok(RawWriter { partial, done, file: Some(file), records: 0, whole: 0, failed: false })
    }

    /// Appends a record, compressed as one gzip member and written to the OS in one call, so it
    /// survives a kill of this process (a kill in the middle leaves a truncated last member,
    /// which reading a partial segment stops at).
    pub fn write(&mut self, rec: &RawRecord) -> Result<(), OutError> {
        let file = self.file.as_mut().expect("writer not finished");
        if self.failed {
            return Err(OutError::Io {
                action: "write",
                path: self.partial.display().to_string(),
                source: std::io::Error::other("an earlier write to this segment failed"),
            });
        }
        let mut line = serde_json::to_vec(rec).expect("records serialise");
        line.push(b'\n');
        let member = gzip_member(&line).map_err(io_err("compress", &self.partial))?;
        if let Err(e) = file.write_all(&member) {
            // Part of the member may be in the file (a full disk): cut it off, so the segment
            // ends with its last whole record (shortening needs no space).
            self.failed = true;
            if let Err(cut) = file.set_len(self.whole) {
                // The segment stays partial: reading it stops at the torn member either way.
                tracing::warn!(path = %self.partial.display(), error = %cut, "cannot cut a torn record off the landing segment");
            }
            return Err(io_err("write", &self.partial)(e));
        }
        self.whole += member.len() as u64;
        self.records += 1;
        Ok(())
    }

    /// Syncs the segment and gives it its final name; a segment without records is one empty
    /// gzip member (a gzip reader refuses an empty file).
    pub fn finish(mut self) -> Result<PathBuf, OutError> {
        let mut file = self.file.take().expect("writer not finished");
        if self.failed {
            // Left partial: the next invocation recovers its whole records.
            return Err(OutError::Io {
                action: "finish",
                path: self.partial.display().to_string(),
                source: std::io::Error::other("a write to this segment failed; it is recovered by the next run"),
            });
        }
        if self.records == 0 {
            gzip_member(b"").and_then(|member| file.write_all(&member)).map_err(io_err("write", &self.partial))?;
        }
        file.sync_all().map_err(io_err("sync", &self.partial))?;
        fs::rename(&self.partial, &self.done).map_err(io_err("rename", &self.done))?;
        Ok(self.done.clone())
    }
}

/// Compressors kept between records (a compressor's state is about 370 KB, and making one for
/// every record cost as much CPU as compressing it): at most this many wait for reuse.
static COMPRESSORS: std::sync::Mutex<Vec<flate2::Compress>> = std::sync::Mutex::new(Vec::new());
const KEPT_COMPRESSORS: usize = 8;

/// `data` as one gzip member (RFC 1952: the header, raw deflate, CRC-32 and length), with a
/// compressor from [`COMPRESSORS`], returned there once reset.
fn gzip_member(data: &[u8]) -> std::io::Result<Vec<u8>> {
    use flate2::{Compress, FlushCompress, Status};
    let taken = COMPRESSORS.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut c = taken.unwrap_or_else(|| Compress::new(Compression::fast(), false));
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    // Magic, deflate, no flags, no time, no extra flags, an unknown OS (RFC 1952).
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(4096));
        }
        let consumed = c.total_in() as usize;
        match c.compress_vec(&data[consumed..], &mut out, FlushCompress::Finish).map_err(std::io::Error::other)? {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {}
        }
    }
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    c.reset();
    let mut kept = COMPRESSORS.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() < KEPT_COMPRESSORS {
        kept.push(c);
    }
    Ok(out)
}

/// Reads every record of a gzip JSON-lines file. In a partial segment (`finished` false) it
/// stops quietly at a truncated tail, where the writer was killed; in a finished one, any bad
/// record is an error naming the file and line.
fn read_segment(path: &Path, finished: bool) -> Result<Vec<RawRecord>, OutError> {
    let file = File::open(path).map_err(io_err("open", path))?;
    let mut out = vec![];
    let mut reader = BufReader::new(MultiGzDecoder::new(file));
    let mut line = String::new();
    let corrupt = |n: usize, reason: String| OutError::Corrupt { path: path.display().to_string(), line: n, reason };
    for n in 1.. {
        line.clear();
        let problem = match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with('\n') => match serde_json::from_str::<RawRecord>(&line) {
                Ok(r) => {
                    out.push(r);
                    continue;
                }
                Err(e) => format!("not a landed record: {e}"),
            },
            Ok(_) => "the last line has no end".to_owned(),
            Err(e) => format!("cannot decompress: {e}"),
        };
        if finished {
            return Err(corrupt(n, problem));
        }
        // A partial segment: the writer was killed here.
        break;
    }
    Ok(out)
}

/// Completes segments a killed invocation left as `.partial`: rewrites their readable records
/// as a proper segment and removes the partial file.
pub fn recover_partials(dir: &Path) -> Result<u64, OutError> {
    let mut recovered = 0;
    let Ok(entries) = fs::read_dir(dir) else { return Ok(0) };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(final_name) = name.strip_suffix(".partial") else {
            continue;
        };
        let records = read_segment(&path, false)?;
        let final_path = dir.join(final_name);
        let tmp = dir.join(format!("{final_name}.recovering"));
        {
            let file = File::create(&tmp).map_err(io_err("create", &tmp))?;
            let mut enc = GzEncoder::new(file, Compression::fast());
            for r in &records {
                serde_json::to_writer(&mut enc, r).expect("records serialise");
                enc.write_all(b"\n").map_err(io_err("write", &tmp))?;
            }
            enc.finish().and_then(|f| f.sync_all()).map_err(io_err("write", &tmp))?;
        }
        fs::rename(&tmp, &final_path).map_err(io_err("rename", &final_path))?;
        fs::remove_file(&path).map_err(io_err("remove", &path))?;
        recovered += records.len() as u64;
    }
    Ok(recovered)
}

/// Every record of a run's landing, complete segments and partial ones, in `seq` order.
pub fn read_run(dir: &Path) -> Result<Vec<RawRecord>, OutError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err("read", dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("part-") && (n.ends_with(".jsonl.gz") || n.ends_with(".jsonl.gz.partial"))
            })
        })
        .collect();
    paths.sort();
    let mut all = vec![];
    for p in paths {
        let finished = p.extension().is_some_and(|e| e == "gz");
        all.extend(read_segment(&p, finished)?);
    }
    all.sort_by_key(|r| r.seq);
    all.dedup_by_key(|r| r.seq);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64) -> RawRecord {
        RawRecord {
            seq,
            invocation: 1,
            endpoint: "list_applications".into(),
            path: "campaign_applications".into(),
            query: BTreeMap::from([("page".into(), seq.to_string())]),
            received_at: Utc::now(),
            status: 200,
            attempts: 1,
            pass: Some(1),
            window: None,
            valid: true,
            problem: None,
            body: format!("{{\"n\":{seq}}}"),
        }
    }

    #[test]
    fn a_killed_writer_leaves_every_flushed_record_readable() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RawWriter::create(dir.path(), 1).unwrap();
        for i in 1..=3 {
            w.write(&rec(i)).unwrap();
        }
        // Simulate a kill: the segment is never finished.
        std::mem::forget(w);
        assert_eq!(read_run(dir.path()).unwrap().len(), 3);
        assert_eq!(recover_partials(dir.path()).unwrap(), 3);
        let names: Vec<String> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names, vec!["part-0001.jsonl.gz".to_owned()]);
        let mut w = RawWriter::create(dir.path(), 2).unwrap();
        w.write(&rec(4)).unwrap();
        w.finish().unwrap();
        let all = read_run(dir.path()).unwrap();
        assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(all[0], {
            let mut r = rec(1);
            r.received_at = all[0].received_at;
            r
        });
    }

    /// A segment is one gzip member a record (one empty member when it has none), and a kill in the middle
    /// of a record's write leaves the records before it readable; `zcat` reads it whole.
    #[test]
    fn a_segment_is_a_member_a_record_and_a_torn_last_member_is_a_killed_tail() {
        let dir = tempfile::tempdir().unwrap();
        // A member is what gzip makes of the same bytes, whatever their size.
        for size in [0usize, 10, 100_000, 3_000_000] {
            let data: Vec<u8> = (0..size).map(|i| (i * 7919 % 251) as u8).collect();
            let member = gzip_member(&data).unwrap();
            let mut back = vec![];
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&member[..]), &mut back).unwrap();
            assert_eq!(back, data, "{size} bytes");
        }
        let empty = RawWriter::create(dir.path(), 1).unwrap().finish().unwrap();
        assert_eq!(read_segment(&empty, true).unwrap().len(), 0);
        let mut w = RawWriter::create(dir.path(), 2).unwrap();
        w.write(&rec(1)).unwrap();
        w.write(&rec(2)).unwrap();
        let whole = w.finish().unwrap();
        let bytes = fs::read(&whole).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut MultiGzDecoder::new(&bytes[..]), &mut text).unwrap();
        assert_eq!(text.lines().count(), 2);
        let torn = dir.path().join("part-0003.jsonl.gz.partial");
        fs::write(&torn, &bytes[..bytes.len() * 3 / 4]).unwrap();
        assert_eq!(read_segment(&torn, false).unwrap().iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
        assert!(read_segment(&torn, true).is_err(), "a torn member in a finished segment is an error");
    }

    /// Regression: a bad record inside a finished segment was read as a "truncated tail", and the
    /// records after it were silently dropped.
    #[test]
    fn a_corrupt_record_in_a_finished_segment_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part-0001.jsonl.gz");
        let mut enc = GzEncoder::new(File::create(&path).unwrap(), Compression::fast());
        for line in
            [serde_json::to_string(&rec(1)).unwrap(), "{not json".into(), serde_json::to_string(&rec(3)).unwrap()]
        {
            enc.write_all(format!("{line}\n").as_bytes()).unwrap();
        }
        enc.finish().unwrap();
        let err = read_run(dir.path()).unwrap_err().to_string();
        assert!(err.contains("part-0001.jsonl.gz") && err.contains("corrupt at line 2"), "{err}");
        // The same bytes in a partial segment are a killed writer's tail: the first record counts.
        fs::rename(&path, dir.path().join("part-0001.jsonl.gz.partial")).unwrap();
        assert_eq!(read_run(dir.path()).unwrap().len(), 1);
    }
}
