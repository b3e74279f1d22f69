//! A shard's whole server dies mid-backfill (issue 31, "a kill of one shard's server mid-run
//! leaves the others' work intact and the failed shard resumable"), not only its sessions.
//!
//! The victim shard lives on a private server the test starts for itself (its own data folder
//! and loopback port, [`PrivateServer`]), so killing it touches no other test: PostgreSQL is
//! stopped with `pg_ctl stop -m immediate` (every server process quits without a checkpoint,
//! a crash by the manual's definition: "Immediate mode ... will lead to crash recovery at next
//! startup", PostgreSQL 15 `pg_ctl`), MariaDB is sent SIGKILL. The run must exit 3 naming the
//! dead shard, the other shard must hold its complete watermarks, the dead one a part of them;
//! once the server is back (crash recovery), the same command finishes the dead shard and the
//! shards together equal one database holding the same data.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;

on_every_backend!(servers: a_dead_server_leaves_the_other_shards_whole);

/// A database server of the test's own on a free loopback port, in a temporary folder.
struct PrivateServer {
    backend: Backend,
    dir: tempfile::TempDir,
    port: u16,
    /// MariaDB: the running `mariadbd` (PostgreSQL runs under `pg_ctl`).
    child: Option<Child>,
}

/// A port no one listens on now (the kernel's choice for a bind to port 0).
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args` as `user` when this test runs as root (initdb refuses root), else as is.
fn run_as(user: &str, program: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", user, "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

/// The newest installed PostgreSQL's `bin` folder (Debian's layout).
fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|p| {
        let v = p
            .parent()
            .and_then(|v| v.file_name())
            .map(|v| v.to_string_lossy().into_owned());
        v.and_then(|v| v.parse::<u32>().ok()).unwrap_or(0)
    });
    dirs.pop()
}

impl PrivateServer {
    /// Starts a fresh server of `backend`'s kind. None (skip) when its binaries are missing and
    /// `CI` is not set.
    ///
    /// # Panics
    ///
    /// When the binaries are missing under `CI`, or the server does not start.
    fn start(backend: Backend) -> Option<PrivateServer> {
        let missing = match backend {
            Backend::Postgres => pg_bin().is_none(),
            _ => !Path::new("/usr/sbin/mariadbd").exists(),
        };
        if missing {
            assert!(
                std::env::var_os("CI").is_none(),
                "{}: no server binaries for a private server under CI",
                backend.name()
            );
            eprintln!("skipping {}: no server binaries", backend.name());
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut server = PrivateServer {
            backend,
            dir,
            port: free_port(),
            child: None,
        };
        server.init();
        server.up();
        Some(server)
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The owner the server runs as, and its data folder made for it.
    fn init(&self) {
        let owner = match self.backend {
            Backend::Postgres => "postgres",
            _ => "mysql",
        };
        if is_root() {
            let chown = Command::new("chown")
                .args(["-R", owner, &self.dir.path().display().to_string()])
                .status()
                .unwrap();
            assert!(chown.success(), "chown {owner}");
        }
        let out = match self.backend {
            Backend::Postgres => run_as(
                owner,
                &pg_bin().unwrap().join("initdb"),
                &["-D", &self.path("data"), "-U", "postgres", "--auth=trust"],
            ),
            _ => Command::new("mariadb-install-db")
                .args(["--no-defaults", "--user=mysql", "--skip-test-db"])
                .arg(format!("--datadir={}", self.path("data")))
                .arg("--auth-root-authentication-method=socket")
                .output()
                .unwrap(),
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server on its data folder and waits until it answers (after a kill: once
    /// crash recovery is done).
    fn up(&mut self) {
        match self.backend {
            Backend::Postgres => {
                let opts = format!(
                    "-p {} -k {} -c listen_addresses=127.0.0.1 -c shared_buffers=16MB \
                     -c max_connections=40",
                    self.port,
                    self.path("")
                );
                let out = run_as(
                    "postgres",
                    &pg_bin().unwrap().join("pg_ctl"),
                    &["-D", &self.path("data"), "-l", &self.path("server.log")]
                        .into_iter()
                        .chain(["-w", "-t", "60", "-o", &opts, "start"])
                        .collect::<Vec<_>>(),
                );
                let log = std::fs::read_to_string(self.path("server.log")).unwrap_or_default();
                assert!(out.status.success(), "pg_ctl start: {log}");
            }
            _ => {
                let child = Command::new("/usr/sbin/mariadbd")
                    .args(["--no-defaults", "--user=mysql", "--bind-address=127.0.0.1"])
                    .arg(format!("--datadir={}", self.path("data")))
                    .arg(format!("--socket={}", self.path("mysqld.sock")))
                    .arg(format!("--log-error={}", self.path("error.log")))
                    .arg(format!("--port={}", self.port))
                    .args(["--skip-name-resolve", "--innodb-buffer-pool-size=32M"])
                    .arg("--performance-schema=OFF")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                self.child = Some(child);
                let grant = "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
                             GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;";
                for _ in 0..120 {
                    let ok = Command::new("mariadb")
                        .args(["--no-defaults", "-uroot", "-e", grant])
                        .arg(format!("--socket={}", self.path("mysqld.sock")))
                        .output()
                        .is_ok_and(|o| o.status.success());
                    if ok {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                let log = std::fs::read_to_string(self.path("error.log")).unwrap_or_default();
                panic!("mariadbd on {} does not answer: {log}", self.port);
            }
        }
    }

    /// The server's admin URL (its `postgres` or `mysql` database).
    fn admin_url(&self) -> String {
        match self.backend {
            Backend::Postgres => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
            _ => format!("mysql://root@127.0.0.1:{}/mysql", self.port),
        }
    }

    /// The whole server dies at once, as in a crash (see the file's comment).
    fn kill(&mut self) {
        match self.backend {
            Backend::Postgres => {
                let out = run_as(
                    "postgres",
                    &pg_bin().unwrap().join("pg_ctl"),
                    &["-D", &self.path("data"), "-m", "immediate", "-w", "stop"],
                );
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            _ => {
                let mut child = self.child.take().expect("mariadbd runs");
                child.kill().unwrap();
                child.wait().unwrap();
            }
        }
    }

    /// Stops the server for good (its folder goes with `self`).
    fn stop(mut self) {
        match self.backend {
            Backend::Postgres => {
                run_as(
                    "postgres",
                    &pg_bin().unwrap().join("pg_ctl"),
                    &["-D", &self.path("data"), "-m", "fast", "-w", "stop"],
                );
            }
            _ => {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

/// A shard's server killed mid-backfill (see the file's comment).
async fn a_dead_server_leaves_the_other_shards_whole(backend: Backend) {
    let Some(one) = databases(backend, "shards_death_one", 1).await else {
        return;
    };
    let Some(mut server) = PrivateServer::start(backend) else {
        return;
    };
    let home = TestDb::create(backend, "shards_death0").await.unwrap();
    let victim = TestDb::create_at(backend, "shards_death1", &server.admin_url())
        .await
        .unwrap();
    let shards = [home, victim];
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let all = per_member_scenarios();
    std::fs::write(d.join("m.toml"), all[0].0.mapping_toml()).unwrap();
    let everything: Vec<usize> = (0..all.len()).collect();
    load(&one[0], d, &all, &everything).await;
    for (k, db) in shards.iter().enumerate() {
        let mine: Vec<usize> = everything.iter().copied().filter(|i| i % 2 == k).collect();
        load(db, d, &all, &mine).await;
    }
    let single = [
        "backfill",
        "--database",
        &one[0].url,
        "--mapping",
        "m.toml",
        "--quiet",
    ];
    run(d, &single).expect_code(0);
    let want = watermarks(&one[0]).await;
    // Batches of one conversation, a pause after each: the run lasts seconds.
    let args = [
        "backfill",
        "--mapping",
        "m.toml",
        "--quiet",
        "--batch-size",
        "1",
        "--chunk-time",
        "0s",
        "--pause-between-batches",
        "400ms",
    ];
    let child = crate::common::bin::command()
        .args(with_databases(&args, &shards))
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the victim has written a watermark of the backfill, its server dies.
    let written = |wms: &Watermarks| {
        wms.values()
            .filter(|(_, source)| source.as_deref() != Some("application"))
            .count()
    };
    let mut killed = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if written(&watermarks(&shards[1]).await) > 0 {
            server.kill();
            killed = true;
            break;
        }
    }
    assert!(killed, "the victim shard wrote no watermark in 10 s");
    let out: Run = child.wait_with_output().unwrap().into();
    out.expect_code(3);
    let name = &shards[1].name;
    assert!(
        out.stderr.contains(&format!("shard {name}: error")),
        "{}",
        out.stderr
    );
    // The other shard finished. The dead one, back after crash recovery, holds a part.
    let done = watermarks(&shards[0]).await;
    assert!(!done.is_empty() && done.iter().all(|(k, v)| want.get(k) == Some(v)));
    server.up();
    let part = watermarks(&shards[1]).await;
    let part_done = part
        .iter()
        .filter(|(k, v)| want.get(*k) == Some(*v))
        .count();
    let victims_want = want.len() - done.len();
    assert!(
        part_done < victims_want,
        "the dead shard finished before the kill ({part_done} of {victims_want})"
    );
    // The same command again finishes it; the shards equal the one database.
    run(d, &with_databases(&args[..4], &shards)).expect_code(0);
    assert_eq!(union(&shards).await, want, "after the rerun");
    expected_watermarks_in(&all, &want);
    for db in one.into_iter().chain(shards) {
        db.cleanup().await;
    }
    server.stop();
}
