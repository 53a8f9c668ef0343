//! StreamLLM: an agent's request takes the one road to the model ([`crate::model::llm::call`]) and
//! each event comes back as it arrives. When the agent goes away, dropping this stream drops
//! the gateway call, and the gateway stops its upstream request.

use baaaht_proto::v1;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Shared;
use crate::base::auth::{Caller, Live};
use crate::model::llm::call::{AgentCall, CallError, Payer};
use crate::model::llm::GatewayError;

impl From<GatewayError> for Status {
    fn from(error: GatewayError) -> Status {
        match error {
            GatewayError::Off(_) | GatewayError::NoModel(_) => Status::failed_precondition(error.to_string()),
            GatewayError::Unavailable { .. }
            | GatewayError::Starting
            | GatewayError::Down(_)
            | GatewayError::Health(_)
            | GatewayError::HealthTimeout
            | GatewayError::NoSocket(_)
            | GatewayError::Connect { .. }
            | GatewayError::Configure(_)
            | GatewayError::ConfigureTimeout => Status::unavailable(error.to_string()),
        }
    }
}

impl From<CallError> for Status {
    fn from(error: CallError) -> Status {
        match error {
            CallError::Budget(sentence) => Status::resource_exhausted(sentence),
            CallError::Gateway(error) => error.into(),
            CallError::Refused(status) => status,
            CallError::Failed(why) => Status::unavailable(why),
        }
    }
}

pub(super) async fn stream(
    shared: &Shared,
    caller: Caller,
    live: Option<Live>,
    request: Request<v1::LlmRequest>,
) -> Result<Response<BoxStream<v1::LlmEvent>>, Status> {
    let Caller::Container(identity) = &caller else {
        return Err(Status::permission_denied("StreamLLM is for agent containers"));
    };
    let payer = Payer {
        principal: crate::guard::audit::principal(&caller),
        context: identity.context.clone(),
        session: identity.session_id.clone(),
        correlation_id: super::correlation_id(&request),
    };
    let call = AgentCall { payer, role: identity.role, live };
    Ok(Response::new(shared.calls.for_agent(call, request.into_inner()).await?))
}
