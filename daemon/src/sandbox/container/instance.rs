//! A long-running helper the daemon starts and watches — the LLM gateway, a web or Slack
//! gateway — as a host process or in a container.

use super::manager::ContainerManager;

/// One running helper.
pub enum Instance {
    Process(tokio::process::Child),
    /// The container's name.
    Container(String),
}

impl Instance {
    /// Resolves, with why, when a host process exits; a container's end shows in its health
    /// checks instead, so this never resolves for one.
    pub async fn exited(&mut self) -> String {
        match self {
            Instance::Process(child) => match child.wait().await {
                Ok(status) => format!("the gateway process exited ({status})"),
                Err(error) => format!("cannot wait for the gateway process: {error}"),
            },
            Instance::Container(_) => std::future::pending().await,
        }
    }

    /// Stops the process, or removes the container.
    pub async fn stop(self, containers: &ContainerManager) {
        match self {
            Instance::Process(mut child) => {
                if let Err(error) = child.kill().await {
                    tracing::warn!(%error, "cannot stop the gateway process");
                }
            }
            Instance::Container(name) => {
                if let Err(error) = containers.stop_service(&name).await {
                    tracing::warn!(container = %name, %error, "cannot remove the gateway's container");
                }
            }
        }
    }
}
