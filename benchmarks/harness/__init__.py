"""The benchmark harness: tenure and its peers on the same servers, with the same job."""
