"""The adapter fetcher: a small HTTP server in every LoRA engine pod (a second container of the
operator's image) that copies an adapter from an object store (s3://, gs://) or from a Hugging
Face repo at a revision into a directory shared with the engine, so that vLLM's runtime LoRA
API, which reads only local paths and Hub repos at their main revision, can load it."""
