"""What the planner knows of the world outside an LLMDeployment: the models and GPUs it sizes
layouts for.

- known_models: the built-in catalog of architecture figures, by model name;
- hfconfig, hfconfig_layers, hfquant: a model's figures and checkpoint weights read from its
  Hugging Face config.json;
- hub: where a config.json lives on the Hub, and the one reader of it (HTTP client and cache);
- gpu_profiles: the named GPU node pools the chart installs (Helm value gpuProfiles).

The CRD API types live in llmfleet.models; this package builds on them (ModelSpec,
ModelArchitecture), never the other way round.
"""
