//! RequestToolExecution (an agent asks for a tool call) and ServeTools (a tool container's
//! runner takes calls).

use std::sync::Arc;

use baaaht_proto::v1;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::Shared;
use super::{from_wire, to_wire};
use crate::base::auth::{Caller, ContainerIdentity};
use crate::work::tools::call::{Asked, CallError};
use crate::work::tools::ToolsError;

impl From<ToolsError> for Status {
    fn from(error: ToolsError) -> Status {
        match error {
            ToolsError::Timeout(_) => Status::deadline_exceeded(error.to_string()),
            ToolsError::DiskFull => Status::resource_exhausted(error.to_string()),
            ToolsError::Workspace(crate::sandbox::workspace::WorkspaceError::TooMany(_)) => {
                Status::resource_exhausted(baaaht_proto::error_chain(&error))
            }
            ToolsError::Workspace(_) | ToolsError::Ipc { .. } => Status::internal(baaaht_proto::error_chain(&error)),
            _ => Status::unavailable(error.to_string()),
        }
    }
}

impl From<CallError> for Status {
    fn from(error: CallError) -> Status {
        match error {
            CallError::Refused(why) => Status::permission_denied(why),
            CallError::Invalid(why) => Status::invalid_argument(why),
            CallError::NotFound(why) => Status::not_found(why),
            CallError::Unready(why) => Status::failed_precondition(why),
            CallError::Tools(error) => Status::from(error),
        }
    }
}

pub(super) async fn request(
    shared: &Shared,
    caller: Caller,
    request: Request<v1::ToolRequest>,
) -> Result<Response<v1::ToolResponse>, Status> {
    let Caller::Container(identity) = &caller else {
        return Err(Status::permission_denied("RequestToolExecution is for agent containers"));
    };
    let correlation_id = crate::server::correlation_id(&request);
    let message = request.into_inner();
    let asked = Asked {
        tool: message.tool,
        params_json: message.params_json,
        timeout_seconds: message.timeout_seconds,
        tool_call_id: message.tool_call_id,
    };
    let answer = shared.tool_calls.execute(identity, &correlation_id, asked).await?;
    Ok(Response::new(to_wire::tool_response(answer)))
}

/// The MCP tools offered to the agent `identity`, as its registration lists them.
pub(super) async fn mcp_definitions(shared: &Shared, identity: &Arc<ContainerIdentity>) -> Vec<v1::ToolDefinition> {
    let offered = shared.tool_calls.mcp_offers(identity).await;
    offered
        .into_iter()
        .map(|offered| v1::ToolDefinition {
            name: offered.name,
            description: offered.description,
            parameters_json: offered.parameters.to_string(),
        })
        .collect()
}

pub(super) fn serve(
    shared: &Shared,
    caller: Caller,
    request: Request<Streaming<v1::RunnerMessage>>,
) -> Result<Response<BoxStream<v1::ToolCall>>, Status> {
    let Caller::Container(identity) = caller else {
        return Err(Status::permission_denied("ServeTools is for tool containers"));
    };
    let results = from_wire::ups(request.into_inner(), from_wire::runner_message);
    let calls = shared.tools.attach(&identity, results);
    let stream = tokio_stream::wrappers::ReceiverStream::new(calls);
    Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(stream, |down| Ok(to_wire::tool_call(down))))))
}
