// SentencePiece behind a C interface, built as its own shared object and loaded by tokenizer.cpp
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Why: Debian's libsentencepiece carries its own copy of protobuf-lite and exports its symbols, and
// LibTorch loads the system libprotobuf. Linked into one process the two copies bind to each
// other's functions and libprotobuf crashes in its static initializers. Loaded deep-bound and
// local, SentencePiece resolves protobuf to its own copy and nothing else ever sees it.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace sentencepiece::logging {
void SetMinLogLevel(int level);  // exported by libsentencepiece, not declared by its public headers
}

namespace {

// Deep-bound, SentencePiece's std::cerr is libstdc++'s own object, which the executable's copy of it
// replaced before its initialization: writing to it crashes. Its log is therefore off below FATAL
// (errors come back as statuses).
struct QuietLog {
  QuietLog() { sentencepiece::logging::SetMinLogLevel(3); }
} quiet_log;

void copy_error(const std::string& message, char* error, size_t error_size) {
  if (error_size == 0) return;
  std::strncpy(error, message.c_str(), error_size - 1);
  error[error_size - 1] = '\0';
}

// The text's non-empty lines, as SentencePiece's trainer reads sentences.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  LineIterator(const char* text, size_t size) : text_(text, size) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (position_ < text_.size()) {
      size_t end = text_.find('\n', position_);
      if (end == std::string::npos) end = text_.size();
      line_.assign(text_, position_, end - position_);
      position_ = end + 1;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::string text_;
  size_t position_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* archipelago_spm_load(const char* model, size_t size, char* error,
                                                                  size_t error_size) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  auto status = processor->LoadFromSerializedProto(std::string(model, size));
  if (!status.ok()) {
    copy_error(status.ToString(), error, error_size);
    delete processor;
    return nullptr;
  }
  return processor;
}

__attribute__((visibility("default"))) void archipelago_spm_free(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

__attribute__((visibility("default"))) int archipelago_spm_size(const void* processor) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->GetPieceSize();
}

// kind: 0 a piece of text, 1 a byte piece ("<0xAB>"), 2 control, unknown or unused (no text).
__attribute__((visibility("default"))) void archipelago_spm_piece(const void* processor, int id, const char** piece,
                                                                  size_t* length, int* kind) {
  const auto* sp = static_cast<const sentencepiece::SentencePieceProcessor*>(processor);
  const std::string& text = sp->IdToPiece(id);
  *piece = text.data();
  *length = text.size();
  *kind = sp->IsByte(id) ? 1 : (sp->IsControl(id) || sp->IsUnknown(id) || sp->IsUnused(id)) ? 2 : 0;
}

// Frees a buffer this object allocated (the ids of an encode, a trained model). Deep-bound, the
// shim's malloc may not be the process's (a preloaded or linked tcmalloc, jemalloc): memory that
// crosses the boundary goes back through the side that allocated it.
__attribute__((visibility("default"))) void archipelago_spm_free_buffer(void* buffer) { std::free(buffer); }

// The ids of `text` in a buffer of this object (free with archipelago_spm_free_buffer); -1 when encoding fails.
__attribute__((visibility("default"))) int archipelago_spm_encode(const void* processor, const char* text, size_t size,
                                                                  int** ids, size_t* count) {
  std::vector<int> out;
  auto status = static_cast<const sentencepiece::SentencePieceProcessor*>(processor)->Encode(
      std::string_view(text, size), &out);
  if (!status.ok()) return -1;
  *count = out.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
  if (!*ids) return -1;
  std::memcpy(*ids, out.data(), sizeof(int) * out.size());
  return 0;
}

// Trains on `text` (one sentence a line) with SentencePiece's command-line `args`; the serialized
// model in a buffer of this object (free with archipelago_spm_free_buffer). 0 on success, else -1 with the error.
__attribute__((visibility("default"))) int archipelago_spm_train(const char* args, const char* text, size_t size,
                                                                 char** model, size_t* model_size, char* error,
                                                                 size_t error_size) {
  LineIterator lines(text, size);
  std::string serialized;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &serialized);
  if (!status.ok()) {
    copy_error(status.ToString(), error, error_size);
    return -1;
  }
  *model = static_cast<char*>(std::malloc(serialized.empty() ? 1 : serialized.size()));
  if (!*model) return -1;
  std::memcpy(*model, serialized.data(), serialized.size());
  *model_size = serialized.size();
  return 0;
}

}  // extern "C"
