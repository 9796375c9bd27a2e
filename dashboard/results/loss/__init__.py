"""The loss mesh's archive (#27): TWAMP-light period summaries from the agents (the contract's lossSummary).
ingest stores them (writes), selectors reads them (the list, the windowed grid, a pair's history), rules finds
problems in them (pure)."""
