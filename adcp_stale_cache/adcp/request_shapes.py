"""Which arrays of a request are sets and which members have defaults, per tool and AdCP
release (3.0, 3.1, 3.2; ``any``: what every release agrees on). Generated from the request
schemas by ``python -m bench.request_shapes``: do not edit.

A node maps a member name to its node; ``@items`` is an array's item, ``@any`` any other
member of an object, ``@set`` marks a set array and ``@default`` a member's default.
"""

from typing import Any

SHAPES: dict[str, dict[str, dict[str, Any]]] = {
    "get_products": {
        "3.0": {
            "account": {"sandbox": {"@default": False}},
            "catalog": {
                "conversion_events": {"@set": True},
                "feed_field_mappings": {"@items": {"separator": {"@default": ","}}},
            },
            "filters": {
                "channels": {"@set": True},
                "keywords": {"@items": {"match_type": {"@default": "broad"}}},
            },
            "pagination": {"max_results": {"@default": 50}},
            "refine": {"@items": {"action": {"@default": "include"}}},
        },
        "3.1": {
            "account": {"sandbox": {"@default": False}},
            "catalog": {
                "conversion_events": {"@set": True},
                "feed_field_mappings": {"@items": {"separator": {"@default": ","}}},
            },
            "filters": {
                "audio_distribution_types": {"@set": True},
                "channels": {"@set": True},
                "keywords": {"@items": {"match_type": {"@default": "broad"}}},
                "pricing_currencies": {"@set": True},
                "required_metrics": {"@set": True},
                "signal_targeting": {"@items": {"targeting_mode": {"@default": "include"}}},
                "social_placement_surfaces": {"@set": True},
                "sponsored_placement_types": {"@set": True},
                "video_placement_types": {"@set": True},
            },
            "pagination": {"max_results": {"@default": 50}},
            "refine": {"@items": {"action": {"@default": "include"}}},
        },
        "3.2": {
            "acceptance_context": {
                "advertiser_jurisdictions": {"@set": True},
                "advertiser_roles": {"@set": True},
                "delivery_jurisdictions": {"@set": True},
                "subjects": {"@items": {"subject_facets": {"@set": True}}},
            },
            "account": {"sandbox": {"@default": False}},
            "catalog": {
                "conversion_events": {"@set": True},
                "feed_field_mappings": {"@items": {"separator": {"@default": ","}}},
            },
            "filters": {
                "audience_activation_methods": {
                    "@items": {"directions": {"@set": True}},
                    "@set": True,
                },
                "audience_evidence_requirements": {
                    "accepted_attestation_claim_types": {"@set": True},
                    "accepted_attestation_issuers": {"@set": True},
                    "accepted_evidence_types": {"@set": True},
                    "accepted_methodologies": {"@set": True},
                    "accepted_resolution_methods": {"@set": True},
                    "accepted_subject_types": {"@set": True},
                    "excluded_methodologies": {"@set": True},
                    "independent_attestation_required": {"@default": False},
                    "methodology_documentation_required": {"@default": False},
                },
                "audio_distribution_types": {"@set": True},
                "channels": {"@set": True},
                "format_kinds": {"@set": True},
                "format_option_refs": {"@set": True},
                "keywords": {"@items": {"match_type": {"@default": "broad"}}},
                "pricing_currencies": {"@set": True},
                "pricing_structures": {"@set": True},
                "required_features": {
                    "bidding_policy": {
                        "media_buy": {
                            "fixed": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                            "seller_optimized": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                        },
                        "package": {
                            "fixed": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                            "seller_optimized": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                        },
                    }
                },
                "required_metrics": {"@set": True},
                "signal_targeting": {"@items": {"targeting_mode": {"@default": "include"}}},
                "social_placement_surfaces": {"@set": True},
                "sponsored_placement_types": {"@set": True},
                "video_placement_types": {"@set": True},
            },
            "pagination": {"max_results": {"@default": 50}},
            "refine": {"@items": {"action": {"@default": "include"}}},
            "required_media_buy_support": {
                "frequency_cap_constraints": {
                    "mutable_fields": {"@set": True},
                    "supported_control_modes": {"@set": True},
                    "supported_per_units": {"@set": True},
                    "supported_suppression_units": {"@set": True},
                    "supported_window_units": {"@set": True},
                }
            },
            "required_overlay_support": {
                "browser": {"families": {"@set": True}},
                "browser_exclude": {"families": {"@set": True}},
                "daypart_targets": {
                    "iana_timezones": {"@set": True},
                    "timezone_modes": {"@set": True},
                },
                "frequency_cap_support": {
                    "mutable_fields": {"@set": True},
                    "supported_control_modes": {"@set": True},
                    "supported_per_units": {"@set": True},
                    "supported_suppression_units": {"@set": True},
                    "supported_window_units": {"@set": True},
                },
                "geo_metros": {"systems": {"@set": True}},
                "geo_metros_exclude": {"systems": {"@set": True}},
                "geo_places": {"systems": {"@any": {"countries": {"@any": {"@set": True}}}}},
                "geo_places_exclude": {
                    "systems": {"@any": {"countries": {"@any": {"@set": True}}}}
                },
                "geo_postal_areas": {
                    "@any": {"@set": True},
                    "AT": {"@set": True},
                    "AU": {"@set": True},
                    "BR": {"@set": True},
                    "CA": {"@set": True},
                    "CH": {"@set": True},
                    "DE": {"@set": True},
                    "FR": {"@set": True},
                    "GB": {"@set": True},
                    "IN": {"@set": True},
                    "US": {"@set": True},
                    "ZA": {"@set": True},
                },
                "geo_postal_areas_exclude": {
                    "@any": {"@set": True},
                    "AT": {"@set": True},
                    "AU": {"@set": True},
                    "BR": {"@set": True},
                    "CA": {"@set": True},
                    "CH": {"@set": True},
                    "DE": {"@set": True},
                    "FR": {"@set": True},
                    "GB": {"@set": True},
                    "IN": {"@set": True},
                    "US": {"@set": True},
                    "ZA": {"@set": True},
                },
                "geo_proximity": {"transport_modes": {"@set": True}},
                "geo_regions": {"countries": {"@any": {"values": {"@set": True}}}},
                "geo_regions_exclude": {"countries": {"@any": {"values": {"@set": True}}}},
                "keyword_targets": {"supported_match_types": {"@set": True}},
                "negative_keywords": {"supported_match_types": {"@set": True}},
            },
            "targeting_overlay": {
                "age_restriction": {"verification_required": {"@default": False}},
                "browser": {"@set": True},
                "browser_exclude": {"@set": True},
                "collection_selection": {"collections": {"@set": True}},
                "daypart_targets": {"@items": {"timezone": {"@default": "inventory_local"}}},
                "demographics": {
                    "age": {
                        "accepted_bases": {"@set": True},
                        "accepted_verification_methods": {"@set": True},
                    }
                },
                "keyword_targets": {"@items": {"match_type": {"@default": "broad"}}},
                "negative_keywords": {"@items": {"match_type": {"@default": "broad"}}},
                "placement_selection": {"placement_refs": {"@set": True}},
            },
        },
        "any": {
            "acceptance_context": {
                "advertiser_jurisdictions": {"@set": True},
                "advertiser_roles": {"@set": True},
                "delivery_jurisdictions": {"@set": True},
                "subjects": {"@items": {"subject_facets": {"@set": True}}},
            },
            "account": {"sandbox": {"@default": False}},
            "catalog": {
                "conversion_events": {"@set": True},
                "feed_field_mappings": {"@items": {"separator": {"@default": ","}}},
            },
            "filters": {
                "audience_activation_methods": {
                    "@items": {"directions": {"@set": True}},
                    "@set": True,
                },
                "audience_evidence_requirements": {
                    "accepted_attestation_claim_types": {"@set": True},
                    "accepted_attestation_issuers": {"@set": True},
                    "accepted_evidence_types": {"@set": True},
                    "accepted_methodologies": {"@set": True},
                    "accepted_resolution_methods": {"@set": True},
                    "accepted_subject_types": {"@set": True},
                    "excluded_methodologies": {"@set": True},
                },
                "audio_distribution_types": {"@set": True},
                "channels": {"@set": True},
                "format_kinds": {"@set": True},
                "format_option_refs": {"@set": True},
                "keywords": {"@items": {"match_type": {"@default": "broad"}}},
                "pricing_currencies": {"@set": True},
                "pricing_structures": {"@set": True},
                "required_features": {
                    "bidding_policy": {
                        "media_buy": {
                            "fixed": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                            "seller_optimized": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                        },
                        "package": {
                            "fixed": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                            "seller_optimized": {
                                "cost_per_strengths": {"@set": True},
                                "modes": {"@set": True},
                                "roas_strengths": {"@set": True},
                                "supported_combinations": {
                                    "@items": {
                                        "cost_per_strengths": {"@set": True},
                                        "roas_strengths": {"@set": True},
                                    }
                                },
                            },
                        },
                    }
                },
                "required_metrics": {"@set": True},
                "social_placement_surfaces": {"@set": True},
                "sponsored_placement_types": {"@set": True},
                "video_placement_types": {"@set": True},
            },
            "pagination": {"max_results": {"@default": 50}},
            "refine": {"@items": {"action": {"@default": "include"}}},
            "required_media_buy_support": {
                "frequency_cap_constraints": {
                    "mutable_fields": {"@set": True},
                    "supported_control_modes": {"@set": True},
                    "supported_per_units": {"@set": True},
                    "supported_suppression_units": {"@set": True},
                    "supported_window_units": {"@set": True},
                }
            },
            "required_overlay_support": {
                "browser": {"families": {"@set": True}},
                "browser_exclude": {"families": {"@set": True}},
                "daypart_targets": {
                    "iana_timezones": {"@set": True},
                    "timezone_modes": {"@set": True},
                },
                "frequency_cap_support": {
                    "mutable_fields": {"@set": True},
                    "supported_control_modes": {"@set": True},
                    "supported_per_units": {"@set": True},
                    "supported_suppression_units": {"@set": True},
                    "supported_window_units": {"@set": True},
                },
                "geo_metros": {"systems": {"@set": True}},
                "geo_metros_exclude": {"systems": {"@set": True}},
                "geo_places": {"systems": {"@any": {"countries": {"@any": {"@set": True}}}}},
                "geo_places_exclude": {
                    "systems": {"@any": {"countries": {"@any": {"@set": True}}}}
                },
                "geo_postal_areas": {
                    "@any": {"@set": True},
                    "AT": {"@set": True},
                    "AU": {"@set": True},
                    "BR": {"@set": True},
                    "CA": {"@set": True},
                    "CH": {"@set": True},
                    "DE": {"@set": True},
                    "FR": {"@set": True},
                    "GB": {"@set": True},
                    "IN": {"@set": True},
                    "US": {"@set": True},
                    "ZA": {"@set": True},
                },
                "geo_postal_areas_exclude": {
                    "@any": {"@set": True},
                    "AT": {"@set": True},
                    "AU": {"@set": True},
                    "BR": {"@set": True},
                    "CA": {"@set": True},
                    "CH": {"@set": True},
                    "DE": {"@set": True},
                    "FR": {"@set": True},
                    "GB": {"@set": True},
                    "IN": {"@set": True},
                    "US": {"@set": True},
                    "ZA": {"@set": True},
                },
                "geo_proximity": {"transport_modes": {"@set": True}},
                "geo_regions": {"countries": {"@any": {"values": {"@set": True}}}},
                "geo_regions_exclude": {"countries": {"@any": {"values": {"@set": True}}}},
                "keyword_targets": {"supported_match_types": {"@set": True}},
                "negative_keywords": {"supported_match_types": {"@set": True}},
            },
            "targeting_overlay": {
                "browser": {"@set": True},
                "browser_exclude": {"@set": True},
                "collection_selection": {"collections": {"@set": True}},
                "demographics": {
                    "age": {
                        "accepted_bases": {"@set": True},
                        "accepted_verification_methods": {"@set": True},
                    }
                },
                "placement_selection": {"placement_refs": {"@set": True}},
            },
        },
    },
    "get_signals": {
        "3.0": {
            "account": {"sandbox": {"@default": False}},
            "pagination": {"max_results": {"@default": 50}},
        },
        "3.1": {
            "account": {"sandbox": {"@default": False}},
            "fields": {"@set": True},
            "pagination": {"max_results": {"@default": 50}},
        },
        "3.2": {
            "account": {"sandbox": {"@default": False}},
            "fields": {"@set": True},
            "pagination": {"max_results": {"@default": 50}},
        },
        "any": {
            "account": {"sandbox": {"@default": False}},
            "fields": {"@set": True},
            "pagination": {"max_results": {"@default": 50}},
        },
    },
    "list_products": {
        "3.2": {
            "account": {"sandbox": {"@default": False}},
            "criteria": {
                "acceptance_context": {
                    "advertiser_jurisdictions": {"@set": True},
                    "advertiser_roles": {"@set": True},
                    "delivery_jurisdictions": {"@set": True},
                    "subjects": {"@items": {"subject_facets": {"@set": True}}},
                },
                "offer_filters": {
                    "audience_evidence_requirements": {
                        "accepted_attestation_claim_types": {"@set": True},
                        "accepted_attestation_issuers": {"@set": True},
                        "accepted_evidence_types": {"@set": True},
                        "accepted_methodologies": {"@set": True},
                        "accepted_resolution_methods": {"@set": True},
                        "accepted_subject_types": {"@set": True},
                        "excluded_methodologies": {"@set": True},
                        "independent_attestation_required": {"@default": False},
                        "methodology_documentation_required": {"@default": False},
                    },
                    "audio_distribution_types": {"@set": True},
                    "channels": {"@set": True},
                    "format_kinds": {"@set": True},
                    "format_option_refs": {"@set": True},
                    "pricing_currencies": {"@set": True},
                    "pricing_structures": {"@set": True},
                    "required_features": {
                        "bidding_policy": {
                            "media_buy": {
                                "fixed": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                                "seller_optimized": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                            },
                            "package": {
                                "fixed": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                                "seller_optimized": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                            },
                        }
                    },
                    "required_metrics": {"@set": True},
                    "social_placement_surfaces": {"@set": True},
                    "sponsored_placement_types": {"@set": True},
                    "video_placement_types": {"@set": True},
                },
                "policy_ids": {"@set": True},
                "product_ids": {"@set": True},
                "required_media_buy_support": {
                    "frequency_cap_constraints": {
                        "mutable_fields": {"@set": True},
                        "supported_control_modes": {"@set": True},
                        "supported_per_units": {"@set": True},
                        "supported_suppression_units": {"@set": True},
                        "supported_window_units": {"@set": True},
                    }
                },
                "required_overlay_support": {
                    "browser": {"families": {"@set": True}},
                    "browser_exclude": {"families": {"@set": True}},
                    "daypart_targets": {
                        "iana_timezones": {"@set": True},
                        "timezone_modes": {"@set": True},
                    },
                    "frequency_cap_support": {
                        "mutable_fields": {"@set": True},
                        "supported_control_modes": {"@set": True},
                        "supported_per_units": {"@set": True},
                        "supported_suppression_units": {"@set": True},
                        "supported_window_units": {"@set": True},
                    },
                    "geo_metros": {"systems": {"@set": True}},
                    "geo_metros_exclude": {"systems": {"@set": True}},
                    "geo_places": {"systems": {"@any": {"countries": {"@any": {"@set": True}}}}},
                    "geo_places_exclude": {
                        "systems": {"@any": {"countries": {"@any": {"@set": True}}}}
                    },
                    "geo_postal_areas": {
                        "@any": {"@set": True},
                        "AT": {"@set": True},
                        "AU": {"@set": True},
                        "BR": {"@set": True},
                        "CA": {"@set": True},
                        "CH": {"@set": True},
                        "DE": {"@set": True},
                        "FR": {"@set": True},
                        "GB": {"@set": True},
                        "IN": {"@set": True},
                        "US": {"@set": True},
                        "ZA": {"@set": True},
                    },
                    "geo_postal_areas_exclude": {
                        "@any": {"@set": True},
                        "AT": {"@set": True},
                        "AU": {"@set": True},
                        "BR": {"@set": True},
                        "CA": {"@set": True},
                        "CH": {"@set": True},
                        "DE": {"@set": True},
                        "FR": {"@set": True},
                        "GB": {"@set": True},
                        "IN": {"@set": True},
                        "US": {"@set": True},
                        "ZA": {"@set": True},
                    },
                    "geo_proximity": {"transport_modes": {"@set": True}},
                    "geo_regions": {"countries": {"@any": {"values": {"@set": True}}}},
                    "geo_regions_exclude": {"countries": {"@any": {"values": {"@set": True}}}},
                    "keyword_targets": {"supported_match_types": {"@set": True}},
                    "negative_keywords": {"supported_match_types": {"@set": True}},
                },
                "targeting_overlay": {
                    "age_restriction": {"verification_required": {"@default": False}},
                    "browser": {"@set": True},
                    "browser_exclude": {"@set": True},
                    "collection_selection": {"collections": {"@set": True}},
                    "daypart_targets": {"@items": {"timezone": {"@default": "inventory_local"}}},
                    "demographics": {
                        "age": {
                            "accepted_bases": {"@set": True},
                            "accepted_verification_methods": {"@set": True},
                        }
                    },
                    "placement_selection": {"placement_refs": {"@set": True}},
                },
            },
            "fields": {"@set": True},
            "max_results": {"@default": 25},
        },
        "any": {
            "account": {"sandbox": {"@default": False}},
            "criteria": {
                "acceptance_context": {
                    "advertiser_jurisdictions": {"@set": True},
                    "advertiser_roles": {"@set": True},
                    "delivery_jurisdictions": {"@set": True},
                    "subjects": {"@items": {"subject_facets": {"@set": True}}},
                },
                "offer_filters": {
                    "audience_evidence_requirements": {
                        "accepted_attestation_claim_types": {"@set": True},
                        "accepted_attestation_issuers": {"@set": True},
                        "accepted_evidence_types": {"@set": True},
                        "accepted_methodologies": {"@set": True},
                        "accepted_resolution_methods": {"@set": True},
                        "accepted_subject_types": {"@set": True},
                        "excluded_methodologies": {"@set": True},
                        "independent_attestation_required": {"@default": False},
                        "methodology_documentation_required": {"@default": False},
                    },
                    "audio_distribution_types": {"@set": True},
                    "channels": {"@set": True},
                    "format_kinds": {"@set": True},
                    "format_option_refs": {"@set": True},
                    "pricing_currencies": {"@set": True},
                    "pricing_structures": {"@set": True},
                    "required_features": {
                        "bidding_policy": {
                            "media_buy": {
                                "fixed": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                                "seller_optimized": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                            },
                            "package": {
                                "fixed": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                                "seller_optimized": {
                                    "cost_per_strengths": {"@set": True},
                                    "modes": {"@set": True},
                                    "roas_strengths": {"@set": True},
                                    "supported_combinations": {
                                        "@items": {
                                            "cost_per_strengths": {"@set": True},
                                            "roas_strengths": {"@set": True},
                                        }
                                    },
                                },
                            },
                        }
                    },
                    "required_metrics": {"@set": True},
                    "social_placement_surfaces": {"@set": True},
                    "sponsored_placement_types": {"@set": True},
                    "video_placement_types": {"@set": True},
                },
                "policy_ids": {"@set": True},
                "product_ids": {"@set": True},
                "required_media_buy_support": {
                    "frequency_cap_constraints": {
                        "mutable_fields": {"@set": True},
                        "supported_control_modes": {"@set": True},
                        "supported_per_units": {"@set": True},
                        "supported_suppression_units": {"@set": True},
                        "supported_window_units": {"@set": True},
                    }
                },
                "required_overlay_support": {
                    "browser": {"families": {"@set": True}},
                    "browser_exclude": {"families": {"@set": True}},
                    "daypart_targets": {
                        "iana_timezones": {"@set": True},
                        "timezone_modes": {"@set": True},
                    },
                    "frequency_cap_support": {
                        "mutable_fields": {"@set": True},
                        "supported_control_modes": {"@set": True},
                        "supported_per_units": {"@set": True},
                        "supported_suppression_units": {"@set": True},
                        "supported_window_units": {"@set": True},
                    },
                    "geo_metros": {"systems": {"@set": True}},
                    "geo_metros_exclude": {"systems": {"@set": True}},
                    "geo_places": {"systems": {"@any": {"countries": {"@any": {"@set": True}}}}},
                    "geo_places_exclude": {
                        "systems": {"@any": {"countries": {"@any": {"@set": True}}}}
                    },
                    "geo_postal_areas": {
                        "@any": {"@set": True},
                        "AT": {"@set": True},
                        "AU": {"@set": True},
                        "BR": {"@set": True},
                        "CA": {"@set": True},
                        "CH": {"@set": True},
                        "DE": {"@set": True},
                        "FR": {"@set": True},
                        "GB": {"@set": True},
                        "IN": {"@set": True},
                        "US": {"@set": True},
                        "ZA": {"@set": True},
                    },
                    "geo_postal_areas_exclude": {
                        "@any": {"@set": True},
                        "AT": {"@set": True},
                        "AU": {"@set": True},
                        "BR": {"@set": True},
                        "CA": {"@set": True},
                        "CH": {"@set": True},
                        "DE": {"@set": True},
                        "FR": {"@set": True},
                        "GB": {"@set": True},
                        "IN": {"@set": True},
                        "US": {"@set": True},
                        "ZA": {"@set": True},
                    },
                    "geo_proximity": {"transport_modes": {"@set": True}},
                    "geo_regions": {"countries": {"@any": {"values": {"@set": True}}}},
                    "geo_regions_exclude": {"countries": {"@any": {"values": {"@set": True}}}},
                    "keyword_targets": {"supported_match_types": {"@set": True}},
                    "negative_keywords": {"supported_match_types": {"@set": True}},
                },
                "targeting_overlay": {
                    "age_restriction": {"verification_required": {"@default": False}},
                    "browser": {"@set": True},
                    "browser_exclude": {"@set": True},
                    "collection_selection": {"collections": {"@set": True}},
                    "daypart_targets": {"@items": {"timezone": {"@default": "inventory_local"}}},
                    "demographics": {
                        "age": {
                            "accepted_bases": {"@set": True},
                            "accepted_verification_methods": {"@set": True},
                        }
                    },
                    "placement_selection": {"placement_refs": {"@set": True}},
                },
            },
            "fields": {"@set": True},
            "max_results": {"@default": 25},
        },
    },
}

#: Each release's top-level request members, per tool.
MEMBERS: dict[str, dict[str, list[str]]] = {
    "get_products": {
        "3.0": [
            "account",
            "adcp_major_version",
            "brand",
            "brief",
            "buying_mode",
            "catalog",
            "context",
            "ext",
            "fields",
            "filters",
            "pagination",
            "preferred_delivery_types",
            "property_list",
            "refine",
            "required_policies",
            "time_budget",
        ],
        "3.1": [
            "account",
            "brand",
            "brief",
            "buying_mode",
            "catalog",
            "context",
            "ext",
            "fields",
            "filters",
            "idempotency_key",
            "if_pricing_version",
            "if_wholesale_feed_version",
            "pagination",
            "preferred_delivery_types",
            "property_list",
            "push_notification_config",
            "refine",
            "required_policies",
            "time_budget",
        ],
        "3.2": [
            "acceptance_context",
            "account",
            "brand",
            "brief",
            "buying_mode",
            "catalog",
            "context",
            "ext",
            "fields",
            "filters",
            "idempotency_key",
            "if_pricing_version",
            "if_wholesale_feed_version",
            "media_buy_frequency_cap",
            "pagination",
            "preferred_delivery_types",
            "property_list",
            "push_notification_config",
            "refine",
            "required_media_buy_support",
            "required_overlay_support",
            "required_policies",
            "targeting_overlay",
            "time_budget",
        ],
    },
    "get_signals": {
        "3.0": [
            "account",
            "adcp_major_version",
            "context",
            "countries",
            "destinations",
            "ext",
            "filters",
            "max_results",
            "pagination",
            "signal_ids",
            "signal_spec",
        ],
        "3.1": [
            "account",
            "context",
            "countries",
            "destinations",
            "discovery_mode",
            "ext",
            "fields",
            "filters",
            "if_pricing_version",
            "if_wholesale_feed_version",
            "max_results",
            "pagination",
            "push_notification_config",
            "signal_ids",
            "signal_refs",
            "signal_spec",
        ],
        "3.2": [
            "account",
            "context",
            "countries",
            "destinations",
            "discovery_mode",
            "ext",
            "fields",
            "filters",
            "if_pricing_version",
            "if_wholesale_feed_version",
            "max_results",
            "pagination",
            "push_notification_config",
            "signal_ids",
            "signal_refs",
            "signal_spec",
        ],
    },
    "list_products": {
        "3.2": [
            "account",
            "adcp_major_version",
            "adcp_version",
            "brand",
            "context",
            "context_id",
            "criteria",
            "cursor",
            "fields",
            "governance_context",
            "idempotency_key",
            "if_feed_version",
            "if_pricing_version",
            "max_results",
            "push_notification_config",
        ]
    },
}
