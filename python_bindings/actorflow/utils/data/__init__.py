"""flow.utils.data: Dataset, TensorDataset, Subset, samplers and DataLoader."""
from .dataloader import DataLoader, default_collate  # noqa: F401
from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split  # noqa: F401
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler  # noqa: F401
