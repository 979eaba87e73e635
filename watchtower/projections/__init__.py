"""Read side: Faust projections and the HTTP API."""
