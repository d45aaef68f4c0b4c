"""torch-quiver-ops: fast graph sampling and feature collection for GNN training.

The ops are ``torch.ops.quiver.*`` (typed wrappers in :mod:`torch_quiver_ops.ops`); the
classes below give PyG and torch-quiver users a sampler and a feature store.
"""
import importlib
import importlib.util

from ._load import cuda_kernels_built, library_path, load_library, package_root

__version__ = "0.1.0"

load_library()

from . import _fake  # noqa: E402,F401  (registers the fake kernels)
from . import aoti, dist, hotness, ops, reorder, synthetic, synthetic_hetero  # noqa: E402
from ._device import init_p2p, p2p_cliques  # noqa: E402
from ._sharing import map_arrays as load_arrays, save_arrays  # noqa: E402
from .feature import Feature  # noqa: E402
from .graphed import GraphedStep  # noqa: E402
from .hetero import HeteroCSRTopo, HeteroSampler  # noqa: E402
from .hotness import presample_hot_order, presample_topology_order  # noqa: E402
from .loader import LinkSampleLoader, Prefetcher, SampleLoader  # noqa: E402
from .sampler import Adj, GraphSageSampler  # noqa: E402
from .topology import CSRTopo  # noqa: E402

# For find_package(TorchQuiverOps) from a libtorch C++ project (set as CMAKE_PREFIX_PATH):
# the package whose library was loaded (the installed copy's, for a source checkout).
cmake_prefix_path = str(package_root())

__all__ = ["Adj", "aoti", "CSRTopo", "Feature", "GraphedStep", "GraphSageSampler",
           "HeteroCSRTopo", "HeteroSampler", "LinkSampleLoader", "Prefetcher", "SampleLoader", "dist", "hotness",
           "ops", "pyg", "reorder", "synthetic", "init_p2p", "p2p_cliques", "presample_hot_order",
           "presample_topology_order",
           "cuda_kernels_built", "library_path", "cmake_prefix_path", "save_arrays",
           "load_arrays"]
if importlib.util.find_spec("torch_geometric") is None:  # (PyG is optional: [pyg])
    __all__.remove("pyg")  # a star import had failed on it without PyG (a probe)


def __getattr__(name: str):
    # torch_quiver_ops.pyg needs torch_geometric: imported at first use, so that
    # ``quiver.pyg.GraphSageSampler`` works as in torch-quiver without making PyG a
    # dependency of the ops.
    if name == "pyg":
        try:
            return importlib.import_module(".pyg", __name__)
        except ImportError as error:  # so that hasattr and getattr's default work
            raise AttributeError(str(error)) from error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
