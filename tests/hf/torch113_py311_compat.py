"""Debian's torch 1.13 under Python 3.11: torch.distributed._shard's ShardedTensorMetadata has a dataclass instance
as a field default, which Python 3.11 rejects ("mutable default ... use default_factory"); transformers' Trainer
imports it through torch.distributed.fsdp. torch 2.0 fixed it upstream with default_factory; this finder applies
the same one-line fix when that module is imported, and does nothing on any other torch."""
import importlib.abc
import importlib.machinery
import sys

_MODULE = "torch.distributed._shard.sharded_tensor.metadata"
_BROKEN = "field(default=TensorProperties())"
_FIXED = "field(default_factory=TensorProperties)"


class _Loader(importlib.machinery.SourceFileLoader):
    def get_data(self, path):
        data = super().get_data(path)
        if path.endswith(".py"):
            data = data.replace(_BROKEN.encode(), _FIXED.encode())
        return data

    def get_code(self, fullname):
        source = self.get_data(self.path)
        return compile(source, self.path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return spec
        spec.loader = _Loader(fullname, spec.origin)
        return spec


if sys.version_info >= (3, 11):
    sys.meta_path.insert(0, _Finder())
