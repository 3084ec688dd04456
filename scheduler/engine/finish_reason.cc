#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {

pagoda::v1::FinishReason ToFinishReason(SequenceStatus status) {
  switch (status) {
    case SequenceStatus::kFinishedStopped:
      return pagoda::v1::FINISH_REASON_STOP;
    case SequenceStatus::kFinishedLength:
      return pagoda::v1::FINISH_REASON_LENGTH;
    case SequenceStatus::kFinishedAborted:
    case SequenceStatus::kFinishedIgnored:
      return pagoda::v1::FINISH_REASON_ABORTED;
    default:
      return pagoda::v1::FINISH_REASON_UNSPECIFIED;
  }
}

std::string_view FinishReasonName(pagoda::v1::FinishReason reason) {
  switch (reason) {
    case pagoda::v1::FINISH_REASON_LENGTH:
      return "length";
    case pagoda::v1::FINISH_REASON_STOP:
      return "stop";
    case pagoda::v1::FINISH_REASON_ABORTED:
      return "abort";
    default:
      return "";
  }
}

std::string_view MetricFinishReason(SequenceStatus status) {
  const std::string_view name = FinishReasonName(ToFinishReason(status));
  if (status == SequenceStatus::kFinishedIgnored || name.empty()) return kFinishReasonError;
  return name;
}

}  // namespace pagoda::scheduler
