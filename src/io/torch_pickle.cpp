// Implements include/fitsum/io/torch_pickle.h: a stack machine over the opcodes torch.save emits for a state dict,
// modelled on Python's pickle.Unpickler (the stack, the mark stack, the memo) but with values of a few closed kinds
// instead of objects. Mutable dicts are frozen once placed in a container, so no value can contain itself, and
// every container records its nesting depth, so nothing recursive ever walks a deep structure.
#include "fitsum/io/torch_pickle.h"

#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace fitsum::io {

namespace {

constexpr std::size_t kMaxPickleValues = std::size_t{1} << 20;
constexpr std::size_t kMaxTensorDims = 16;
constexpr std::size_t kMaxShortText = 256;

enum class Kind { none, boolean, integer, string, tuple, dict, global, storage, tensor };
enum class Callable { ordered_dict, rebuild_tensor, rebuild_parameter, storage_class };

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  Kind kind = Kind::none;
  int depth = 0;                                          // containers: 1 + the depth of their deepest element
  bool frozen = false;                                    // a dict placed in a container can no longer change
  std::int64_t number = 0;                                // boolean, integer; a storage's element count
  std::string text;                                       // string; a storage's key
  std::vector<ValuePtr> items;                            // tuple
  std::vector<std::pair<std::string, ValuePtr>> entries;  // dict, in insertion order
  Callable callable = Callable::ordered_dict;             // global
  c10::ScalarType dtype = c10::ScalarType::Float;         // storage class, storage
  std::unique_ptr<PickledTensor> tensor;                  // tensor
};

struct StorageClass {
  const char* name;
  c10::ScalarType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", c10::ScalarType::Float}, {"DoubleStorage", c10::ScalarType::Double},
    {"HalfStorage", c10::ScalarType::Half},   {"BFloat16Storage", c10::ScalarType::BFloat16},
    {"LongStorage", c10::ScalarType::Long},   {"IntStorage", c10::ScalarType::Int},
    {"ShortStorage", c10::ScalarType::Short}, {"CharStorage", c10::ScalarType::Char},
    {"ByteStorage", c10::ScalarType::Byte},   {"BoolStorage", c10::ScalarType::Bool},
};

bool is_storage_key(const std::string& key) {
  if (key.empty() || key.size() > 64) return false;
  for (const char c : key) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!ok) return false;
  }
  return true;
}

class Unpickler {
 public:
  Unpickler(const unsigned char* data, std::size_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}

  std::vector<PickledTensor> run();

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("'" + source_ + "' is not a state dict as torch.save writes it: " + why + " (at byte " +
                             std::to_string(opcode_at_) +
                             " of data.pkl); load it in Python and save it again with torch.save(state_dict) or "
                             "save_pretrained, or convert it to model.safetensors");
  }

  // ---- reading the byte stream ----
  std::uint64_t read_le(std::size_t bytes) {
    if (bytes > size_ - position_) fail("the pickle ends inside an opcode's argument");
    std::uint64_t value = 0;
    for (std::size_t i = bytes; i > 0; --i) value = (value << 8) | data_[position_ + i - 1];
    position_ += bytes;
    return value;
  }
  std::string read_line() {
    std::string line;
    for (;;) {
      if (position_ >= size_) fail("the pickle ends inside a GLOBAL name");
      const char c = static_cast<char>(data_[position_++]);
      if (c == '\n') return line;
      if (line.size() >= kMaxShortText) fail("a GLOBAL name is longer than " + std::to_string(kMaxShortText));
      line.push_back(c);
    }
  }

  // ---- the stack ----
  ValuePtr make(Kind kind) {
    if (++values_made_ > kMaxPickleValues) fail("more than " + std::to_string(kMaxPickleValues) + " values");
    auto value = std::make_shared<Value>();
    value->kind = kind;
    return value;
  }
  void push(ValuePtr value) {
    if (stack_.size() >= kMaxPickleValues) fail("the stack grows past " + std::to_string(kMaxPickleValues) + " values");
    stack_.push_back(std::move(value));
  }
  ValuePtr pop() {
    if (stack_.size() <= floor()) fail("an opcode takes a value from an empty stack");
    ValuePtr value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<ValuePtr> pop_to_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK and there is none");
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  ValuePtr make_dict() {
    auto dict = make(Kind::dict);
    dict->depth = 1;
    return dict;
  }
  ValuePtr integer(std::int64_t number) {
    auto value = make(Kind::integer);
    value->number = number;
    return value;
  }

  // A value becomes an element of a container: dicts stop changing, depth grows.
  int adopt(Value& element) {
    if (element.kind == Kind::dict) element.frozen = true;
    return element.depth;
  }
  void make_tuple(std::vector<ValuePtr> items) {
    auto tuple = make(Kind::tuple);
    int depth = 0;
    for (auto& item : items) depth = std::max(depth, adopt(*item));
    tuple->depth = depth + 1;
    if (tuple->depth > kMaxPickleDepth) fail("containers nest deeper than " + std::to_string(kMaxPickleDepth));
    tuple->items = std::move(items);
    push(std::move(tuple));
  }

  void op_global();
  void op_reduce();
  void op_build();
  void op_persistent_id();
  void set_items(std::vector<ValuePtr> pairs);
  void op_memo_put(std::uint32_t index);
  void op_memo_get(std::uint32_t index);
  ValuePtr rebuild_tensor(const Value& args);
  bool step();
  bool push_scalar(unsigned char op);
  std::vector<PickledTensor> result();

  const unsigned char* data_;
  std::size_t size_;
  const std::string& source_;
  std::size_t position_ = 0;
  std::size_t opcode_at_ = 0;
  std::size_t values_made_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, ValuePtr> memo_;
  std::map<std::string, std::pair<c10::ScalarType, std::int64_t>> storages_;  // key -> (dtype, numel)
};

void Unpickler::op_global() {
  const std::string module = read_line();
  const std::string name = read_line();
  auto value = make(Kind::global);
  if (module == "collections" && name == "OrderedDict") {
    value->callable = Callable::ordered_dict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    value->callable = Callable::rebuild_tensor;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    value->callable = Callable::rebuild_parameter;
  } else {
    bool found = false;
    for (const auto& storage : kStorageClasses) {
      if (module == "torch" && name == storage.name) {
        value->callable = Callable::storage_class;
        value->dtype = storage.dtype;
        found = true;
      }
    }
    if (!found) fail("it refers to the Python global '" + module + "." + name + "', which a state dict never needs");
  }
  push(std::move(value));
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
ValuePtr Unpickler::rebuild_tensor(const Value& args) {
  const auto& a = args.items;
  if (a.size() != 6 && a.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments");
  if (a[0]->kind != Kind::storage) fail("_rebuild_tensor_v2's first argument is not a storage");
  if (a[1]->kind != Kind::integer || a[1]->number < 0) fail("a tensor's storage offset is not a non-negative integer");
  if (a[2]->kind != Kind::tuple || a[3]->kind != Kind::tuple) fail("a tensor's size or stride is not a tuple");
  if (a[4]->kind != Kind::boolean) fail("a tensor's requires_grad is not a boolean");
  if (a[5]->kind != Kind::dict || !a[5]->entries.empty()) fail("a tensor has backward hooks");
  if (a.size() == 7 && (a[6]->kind != Kind::dict || !a[6]->entries.empty())) fail("a tensor has metadata");
  const auto& sizes = a[2]->items;
  const auto& strides = a[3]->items;
  if (sizes.size() != strides.size() || sizes.size() > kMaxTensorDims) {
    fail("a tensor has " + std::to_string(sizes.size()) + " sizes and " + std::to_string(strides.size()) +
         " strides (at most " + std::to_string(kMaxTensorDims) + " dimensions, one stride each)");
  }
  auto tensor = std::make_unique<PickledTensor>();
  tensor->storage_key = a[0]->text;
  tensor->dtype = a[0]->dtype;
  tensor->storage_numel = a[0]->number;
  tensor->storage_offset = a[1]->number;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i]->kind != Kind::integer || sizes[i]->number < 0 || strides[i]->kind != Kind::integer ||
        strides[i]->number < 0) {
      fail("a tensor's sizes and strides must be non-negative integers");
    }
    tensor->sizes.push_back(sizes[i]->number);
    tensor->strides.push_back(strides[i]->number);
  }
  auto value = make(Kind::tensor);
  value->tensor = std::move(tensor);
  return value;
}

void Unpickler::op_reduce() {
  const ValuePtr args = pop();
  const ValuePtr callable = pop();
  if (callable->kind != Kind::global || args->kind != Kind::tuple) fail("REDUCE without a known global and a tuple");
  switch (callable->callable) {
    case Callable::ordered_dict:
      if (!args->items.empty()) fail("OrderedDict is called with arguments");
      push(make_dict());
      return;
    case Callable::rebuild_tensor:
      push(rebuild_tensor(*args));
      return;
    case Callable::rebuild_parameter: {  // _rebuild_parameter(data, requires_grad, backward_hooks)
      const auto& a = args->items;
      if (a.size() != 3 || a[0]->kind != Kind::tensor || a[1]->kind != Kind::boolean || a[2]->kind != Kind::dict ||
          !a[2]->entries.empty()) {
        fail("_rebuild_parameter takes a tensor, a boolean and no hooks");
      }
      push(a[0]);
      return;
    }
    case Callable::storage_class:
      fail("a storage class is called; storages only appear as persistent ids");
  }
}

// An OrderedDict's instance attributes: a state dict's `_metadata` (module versions), which loading ignores.
void Unpickler::op_build() {
  const ValuePtr state = pop();
  const ValuePtr target = pop();
  if (target->kind != Kind::dict || state->kind != Kind::dict) fail("BUILD on something other than a dict");
  for (const auto& [key, value] : state->entries) {
    if (key != "_metadata") fail("BUILD sets attribute '" + key + "'; a state dict only carries _metadata");
  }
  push(target);
}

// ('storage', storage_class, key, location, numel): one storage, whose bytes are the record data/<key>.
void Unpickler::op_persistent_id() {
  const ValuePtr id = pop();
  const auto& a = id->items;
  if (id->kind != Kind::tuple || a.size() != 5 || a[0]->kind != Kind::string || a[0]->text != "storage" ||
      a[1]->kind != Kind::global || a[1]->callable != Callable::storage_class || a[2]->kind != Kind::string ||
      a[3]->kind != Kind::string || a[4]->kind != Kind::integer) {
    fail("a persistent id is not ('storage', <storage class>, key, location, size)");
  }
  if (!is_storage_key(a[2]->text)) fail("storage key '" + a[2]->text + "' is not a short alphanumeric name");
  if (a[4]->number < 0) fail("storage '" + a[2]->text + "' has a negative size");
  const auto [it, inserted] = storages_.emplace(a[2]->text, std::make_pair(a[1]->dtype, a[4]->number));
  if (!inserted && it->second != std::make_pair(a[1]->dtype, a[4]->number)) {
    fail("storage '" + a[2]->text + "' is described twice with different types or sizes");
  }
  auto storage = make(Kind::storage);
  storage->text = a[2]->text;
  storage->dtype = a[1]->dtype;
  storage->number = a[4]->number;
  push(std::move(storage));
}

void Unpickler::set_items(std::vector<ValuePtr> pairs) {
  const ValuePtr target = pop();
  if (target->kind != Kind::dict || target->frozen) fail("SETITEM on something other than a dict being built");
  if (pairs.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  for (std::size_t i = 0; i < pairs.size(); i += 2) {
    if (pairs[i]->kind != Kind::string) fail("a dict key is not a string");
    if (pairs[i + 1] == target) fail("a dict contains itself");
    const int depth = adopt(*pairs[i + 1]) + 1;
    if (depth > kMaxPickleDepth) fail("containers nest deeper than " + std::to_string(kMaxPickleDepth));
    target->depth = std::max(target->depth, depth);
    target->entries.emplace_back(pairs[i]->text, pairs[i + 1]);
  }
  push(target);
}

void Unpickler::op_memo_put(std::uint32_t index) {
  if (stack_.size() <= floor()) fail("BINPUT with an empty stack");
  if (memo_.size() >= kMaxPickleValues) fail("too many memo entries");
  memo_[index] = stack_.back();
}

void Unpickler::op_memo_get(std::uint32_t index) {
  const auto it = memo_.find(index);
  if (it == memo_.end()) fail("BINGET of memo entry " + std::to_string(index) + ", which was never stored");
  push(it->second);
}

// One opcode; false after STOP.
bool Unpickler::step() {
  opcode_at_ = position_;
  if (position_ >= size_) fail("the pickle ends without STOP");
  const unsigned char op = data_[position_++];
  switch (op) {
    case 0x80:
      fail("PROTO after the start");
    case 'c':
      op_global();
      break;
    case 'R':
      op_reduce();
      break;
    case 'b':
      op_build();
      break;
    case 'Q':
      op_persistent_id();
      break;
    case '(':
      if (marks_.size() >= kMaxPickleValues) fail("too many MARKs");
      marks_.push_back(stack_.size());
      break;
    case '.':
      return false;
    case '}':
      push(make_dict());
      break;
    case 's': {
      auto value = pop();
      auto key = pop();
      set_items({std::move(key), std::move(value)});
      break;
    }
    case 'u':
      set_items(pop_to_mark());
      break;
    case ')':
      make_tuple({});
      break;
    case 't':
      make_tuple(pop_to_mark());
      break;
    case 0x85:
    case 0x86:
    case 0x87: {
      const std::size_t n = op - 0x84u;
      if (stack_.size() < floor() + n) fail("TUPLE" + std::to_string(n) + " with too few values");
      std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      make_tuple(std::move(items));
      break;
    }
    case 'q':
      op_memo_put(static_cast<std::uint32_t>(read_le(1)));
      break;
    case 'r':
      op_memo_put(static_cast<std::uint32_t>(read_le(4)));
      break;
    case 'h':
      op_memo_get(static_cast<std::uint32_t>(read_le(1)));
      break;
    case 'j':
      op_memo_get(static_cast<std::uint32_t>(read_le(4)));
      break;
    default:
      if (!push_scalar(op)) {
        static const char* hex = "0123456789abcdef";
        fail(std::string("opcode 0x") + hex[op >> 4] + hex[op & 15] + ", which torch.save does not write");
      }
  }
  return true;
}

// The opcodes that push one scalar (a string, an integer, a bool, None); false for any other opcode.
bool Unpickler::push_scalar(unsigned char op) {
  switch (op) {
    case 'X': {
      const std::uint64_t length = read_le(4);
      if (length > size_ - position_) fail("a string runs past the end of the pickle");
      auto value = make(Kind::string);
      value->text.assign(reinterpret_cast<const char*>(data_ + position_), static_cast<std::size_t>(length));
      position_ += static_cast<std::size_t>(length);
      push(std::move(value));
      break;
    }
    case 'J':
      push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)))));
      break;
    case 'K':
      push(integer(static_cast<std::int64_t>(read_le(1))));
      break;
    case 'M':
      push(integer(static_cast<std::int64_t>(read_le(2))));
      break;
    case 0x8a: {  // LONG1: n little-endian two's-complement bytes
      const std::size_t n = static_cast<std::size_t>(read_le(1));
      if (n > 8) fail("an integer of " + std::to_string(n) + " bytes (more than 64 bits)");
      std::uint64_t bits = n == 0 ? 0 : read_le(n);
      if (n > 0 && n < 8 && (bits >> (8 * n - 1)) != 0) bits |= ~std::uint64_t{0} << (8 * n);  // sign-extend
      push(integer(static_cast<std::int64_t>(bits)));
      break;
    }
    case 0x88:
    case 0x89: {
      auto value = make(Kind::boolean);
      value->number = op == 0x88 ? 1 : 0;
      push(std::move(value));
      break;
    }
    case 'N':
      push(make(Kind::none));
      break;
    default:
      return false;
  }
  return true;
}

std::vector<PickledTensor> Unpickler::result() {
  if (position_ != size_) fail("bytes follow STOP");
  if (!marks_.empty() || stack_.size() != 1) fail("STOP leaves " + std::to_string(stack_.size()) + " values");
  const Value& top = *stack_.back();
  if (top.kind != Kind::dict) fail("the pickled value is not a dict of tensors");
  std::vector<PickledTensor> tensors;
  tensors.reserve(top.entries.size());
  std::set<std::string> names;
  for (const auto& [name, value] : top.entries) {
    if (value->kind != Kind::tensor) fail("entry '" + name + "' is not a tensor");
    if (!names.insert(name).second) fail("tensor '" + name + "' is stored twice");
    tensors.push_back(*value->tensor);
    tensors.back().name = name;
  }
  return tensors;
}

std::vector<PickledTensor> Unpickler::run() {
  if (size_ > kMaxPickleBytes) {
    fail("data.pkl has " + std::to_string(size_) + " bytes, more than " + std::to_string(kMaxPickleBytes));
  }
  if (size_ < 2 || data_[0] != 0x80 || data_[1] != 2) fail("it does not start with pickle protocol 2");
  position_ = 2;
  while (step()) {
  }
  return result();
}

}  // namespace

std::vector<PickledTensor> read_state_dict_pickle(const unsigned char* data, std::size_t size,
                                                  const std::string& source) {
  return Unpickler(data, size, source).run();
}

}  // namespace fitsum::io
