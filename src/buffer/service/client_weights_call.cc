#include "client_weights_call.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "flywheel/buffer/weight_store.h"
#include "flywheel/core/crc32c.h"

namespace flywheel::buffer {
namespace {

using google::protobuf::internal::WireFormatLite;

// Copies and checksums in pieces that stay in cache between the copy and the checksum.
constexpr size_t kChunkBytes = 128 << 10;

// WeightsBucket's field tags: (field number << 3) | wire type.
constexpr uint32_t kVersionTag = 0x08;  // 1, varint
constexpr uint32_t kOffsetTag = 0x10;   // 2, varint
constexpr uint32_t kDataTag = 0x1A;     // 3, length-delimited
constexpr uint32_t kCrcTag = 0x20;      // 4, varint

// One StreamWeights call: reads WeightsBucket messages as raw bytes and decodes them by hand, so
// that a bucket's data moves from gRPC's receive buffers into the payload in one copy (a parsed
// v1::WeightsBucket would copy it once more).
class WeightsCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  WeightsCall(WeightsTransfer* transfer, uint64_t from, uint64_t to)
      : transfer_(transfer), next_(from), end_(to) {}

  absl::Status run(WeightsStub* stub, grpc::ClientContext* context,
                   const v1::WeightsRequest& request) {
    context_ = context;
    bool own = false;
    grpc::SerializationTraits<v1::WeightsRequest>::Serialize(request, &request_, &own);
    // A server-streaming method called as a bidi stream: on the wire both are one request
    // message followed by the client's half-close.
    stub->PrepareBidiStreamingCall(context, "/flywheel.v1.Controller/StreamWeights",
                                   grpc::StubOptions(), this);
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&bucket_);
    StartCall();
    done_.WaitForNotification();
    if (!error_.ok()) return error_;
    if (!status_.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status_.error_code()),
                          status_.error_message());
    }
    if (next_ != end_) {
      return absl::UnavailableError(
          absl::StrCat("weights stream ended at byte ", next_, " of ", end_));
    }
    return absl::OkStatus();
  }

  uint64_t next() const { return next_; }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone has the status
    absl::Status s = take(&bucket_);
    bucket_.Clear();
    if (!s.ok()) {
      error_ = std::move(s);
      context_->TryCancel();
      return;
    }
    StartRead(&bucket_);
  }

  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

 private:
  // Decodes one WeightsBucket (fields in any order; the data must come after the offset, as
  // protobuf and the server write them) into the payload.
  absl::Status take(grpc::ByteBuffer* message) {
    grpc::ProtoBufferReader reader(message);
    if (!reader.status().ok()) return absl::DataLossError("unreadable weights bucket");
    uint64_t version = 0, offset = 0, size = 0;
    uint32_t sent_crc = 0, crc = 0;
    bool have_data = false;
    while (true) {
      uint32_t tag = 0;
      uint64_t length = 0;
      {
        google::protobuf::io::CodedInputStream in(&reader);
        tag = in.ReadTag();
        if (tag == 0) break;  // the end of the message
        bool read = true;
        switch (tag) {
          case kVersionTag:
            read = in.ReadVarint64(&version);
            break;
          case kOffsetTag:
            read = in.ReadVarint64(&offset) && !have_data;
            break;
          case kCrcTag:
            read = in.ReadVarint32(&sent_crc);
            break;
          case kDataTag:
            read = in.ReadVarint64(&length) && !have_data;
            break;
          default:
            read = WireFormatLite::SkipField(&in, tag);
        }
        if (!read) return absl::DataLossError("malformed weights bucket");
      }  // `in` hands back what it read ahead, so `reader` is at the data
      if (tag != kDataTag) continue;
      have_data = true;
      size = length;
      const uint64_t expected = std::min(transfer_->bucket_bytes, end_ - next_);
      if (static_cast<int64_t>(version) != transfer_->version || offset != next_ ||
          size != expected || offset % transfer_->bucket_bytes != 0) {
        return absl::DataLossError(
            absl::StrCat("unexpected weights bucket: version ", static_cast<int64_t>(version),
                         " bytes [", offset, ", ", offset + size, "); expected version ",
                         transfer_->version, " bytes [", next_, ", ", next_ + expected, ")"));
      }
      char* out = transfer_->payload->data() + offset;
      for (uint64_t left = size; left > 0;) {
        const void* data = nullptr;
        int n = 0;
        if (!reader.Next(&data, &n)) return absl::DataLossError("truncated weights bucket");
        const size_t use = std::min<uint64_t>(left, static_cast<uint64_t>(n));
        for (size_t done = 0; done < use; done += kChunkBytes) {
          const size_t piece = std::min(kChunkBytes, use - done);
          std::memcpy(out + done, static_cast<const char*>(data) + done, piece);
          crc = core::crc32c_extend(crc, out + done, piece);
        }
        out += use;
        left -= use;
        if (use < static_cast<size_t>(n)) reader.BackUp(n - static_cast<int>(use));
      }
    }
    if (!have_data) return absl::DataLossError("weights bucket without data");
    char* bytes = transfer_->payload->data() + offset;
    if (transfer_->corrupt != nullptr && *transfer_->corrupt) {
      (*transfer_->corrupt)(offset, bytes, size);
      crc = core::crc32c_extend(0, bytes, size);
    }
    const uint64_t index = offset / transfer_->bucket_bytes;
    transfer_->crcs[index] = crc;
    transfer_->bad[index] = crc != sent_crc;
    next_ = offset + size;
    return absl::OkStatus();
  }

  WeightsTransfer* transfer_;
  uint64_t next_;  // the offset the next bucket must have
  const uint64_t end_;
  grpc::ClientContext* context_ = nullptr;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer bucket_;
  absl::Status error_;  // a bucket that could not be taken; the call was cancelled
  grpc::Status status_;
  absl::Notification done_;
};

}  // namespace

absl::Status stream_weights_once(WeightsStub* stub, grpc::ClientContext* context,
                                 const v1::WeightsRequest& request, WeightsTransfer* transfer,
                                 uint64_t* received_to) {
  const uint64_t total = transfer->payload->size();
  const uint64_t from = request.offset();
  const uint64_t to = request.length() == 0 ? total : from + request.length();
  WeightsCall call(transfer, from, to);
  absl::Status s = call.run(stub, context, request);
  *received_to = call.next();
  return s;
}

}  // namespace flywheel::buffer
