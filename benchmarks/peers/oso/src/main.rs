//! OSO kafka-backup's engine (the crate kafka-backup-core) behind the smallest command line: `oso-peer CONFIG.yaml`
//! parses the YAML configuration and runs its backup or restore engine, as the tool's own CLI does. A key the engine
//! would ignore is refused, so that a misspelt option never changes what the benchmark measures.

use kafka_backup_core::backup::BackupEngine;
use kafka_backup_core::config::Mode;
use kafka_backup_core::{Config, RestoreEngine};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Its log lines (RUST_LOG, default warn) to standard error, as its CLI prints them.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let path = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: oso-peer CONFIG.yaml"))?;
    let (config, ignored) = Config::from_yaml_with_warnings(&std::fs::read_to_string(&path)?)?;
    if !ignored.is_empty() {
        anyhow::bail!("{path}: keys the engine ignores: {}", ignored.join(", "));
    }
    config.validate()?;
    match config.mode {
        Mode::Backup => BackupEngine::new(config).await?.run().await?,
        Mode::Restore => {
            RestoreEngine::new(config)?.run().await?;
        }
    }
    Ok(())
}
