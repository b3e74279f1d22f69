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
    let (all, want) = load_split(d, &one[0], &shards).await;
    let child = spawn_slow_backfill(d, &shards);
    // Once the victim has written a watermark of the backfill, its server dies.
    let mut killed = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if backfilled(&watermarks(&shards[1]).await) > 0 {
            server.kill();
            killed = true;
            break;
        }
    }
    assert!(killed, "the victim shard wrote no watermark in 10 s");
    let out: Run = child.wait_with_output().unwrap().into();
    // Back after crash recovery, the dead shard holds a part; the rerun finishes it.
    server.up();
    the_rerun_finishes(d, &shards, &out, &all, &want).await;
    for db in one.into_iter().chain(shards) {
        db.cleanup().await;
    }
    server.stop();
}
