"""The incremental, event-at-a-time path: :class:`FeatureState` and its parts."""
