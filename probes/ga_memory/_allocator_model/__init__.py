"""A model of the CUDA caching allocator (pure Python, no torch): the CPU meter's allocation trace
(``trace``) replayed through it (``replay``) estimates what CUDA would reserve for the same step. ``conf``
reads ``PYTORCH_CUDA_ALLOC_CONF`` as torch does, ``model`` holds the pools and segments (``blocks``), and
``expandable`` the expandable segments. docs/allocator.md says how faithful it is."""
