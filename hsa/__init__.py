"""One HSA interface (`hsa.provider.HsaProvider`), two providers: `hsa.rocr` (ctypes over
libhsa-runtime64, real AMD GPUs) and `hsa.virtual` (an in-process virtual AMD system)."""
